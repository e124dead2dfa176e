// io::hf_rope_scaling: both spellings of a LLaMA config.json's RoPE, each honoured field read as
// transformers reads it, and every kind or field it does not honour refused with the field and
// its value named.
#include <string>

#include <shardgraph/io/hf_rope.hpp>
#include <shardgraph/io/json.hpp>

#include "catch.hpp"

namespace sg = shardgraph;
using sg::rope_type;
using sg::testing::ContainsSubstring;

namespace {

sg::rope_scaling parse(const std::string& fields) {
  const bool positions = fields.find("\"max_position_embeddings\"") != std::string::npos;
  const std::string text = "{\"model_type\": \"llama\"" +
                           std::string(positions ? "" : ", \"max_position_embeddings\": 256") +
                           (fields.empty() ? std::string() : ", " + fields) + "}";
  return sg::io::hf_rope_scaling(sg::io::json::parse(text, "config.json"), "config.json");
}

std::string refusal(const std::string& fields) { return sg::testing::error_of([&] { parse(fields); }); }

}  // namespace

TEST_CASE("hf_rope_scaling reads both spellings, null meaning unscaled", "[io]") {
  CHECK(parse("") == sg::rope_scaling{});
  CHECK(parse("\"rope_theta\": 500000.0, \"rope_scaling\": null") == sg::rope_scaling{.theta = 500000});
  CHECK(parse("\"rope_parameters\": null, \"rope_theta\": 20000") == sg::rope_scaling{.theta = 20000});
  CHECK(parse("\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000.0}") ==
        sg::rope_scaling{.theta = 1000});
  const sg::rope_scaling linear{.type = rope_type::linear, .theta = 500000, .factor = 2};
  CHECK(parse("\"rope_theta\": 500000.0, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}") == linear);
  CHECK(parse("\"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2}") == linear);
  CHECK(parse("\"rope_parameters\": {\"rope_type\": \"linear\", \"rope_theta\": 500000.0, \"factor\": 2.0}") ==
        linear);
  // transformers writes both keys, equal, when it re-saves an older config
  CHECK(parse("\"rope_scaling\": {\"type\": \"linear\", \"rope_type\": \"linear\", \"factor\": 2.0, "
              "\"rope_theta\": 500000.0}, \"rope_theta\": 500000.0") == linear);
  CHECK(parse("\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"partial_rotary_factor\": 1.0}")
            .factor == 2);
}

TEST_CASE("hf_rope_scaling fills what transformers fills: lengths, yarn's defaults", "[io]") {
  CHECK(parse("\"rope_parameters\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}") ==
        sg::rope_scaling{.type = rope_type::dynamic, .factor = 2, .original_max_positions = 256});
  const sg::rope_scaling llama3 = parse(
      "\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
      "\"high_freq_factor\": 4.0}");
  CHECK(llama3 == sg::rope_scaling{.type = rope_type::llama3,
                                   .factor = 8,
                                   .original_max_positions = 256,
                                   .low_freq_factor = 1,
                                   .high_freq_factor = 4});
  const sg::rope_scaling yarn = parse(
      "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": null, \"original_max_position_embeddings\": 64, "
      "\"beta_fast\": 0, \"beta_slow\": null, \"attention_factor\": null, \"truncate\": false}");
  CHECK(yarn == sg::rope_scaling{.type = rope_type::yarn,
                                 .factor = 4,
                                 .original_max_positions = 64,
                                 .beta_fast = 32,
                                 .beta_slow = 1,
                                 .attention_factor = 0,
                                 .truncate = false});
}

TEST_CASE("hf_rope_scaling refuses each kind and field it does not honour, naming it and its value", "[io]") {
  const struct {
    std::string fields, message;
  } refused[] = {
      {"\"rope_parameters\": {\"rope_type\": \"longrope\", \"short_factor\": [1], \"long_factor\": [1]}",
       "config.json: rope_parameters.rope_type: rope_parameters.rope_type \"longrope\" is not a RoPE kind"},
      {"\"rope_parameters\": {\"rope_type\": \"proportional\"}", "rope_parameters.rope_type \"proportional\""},
      {"\"rope_scaling\": {\"type\": \"ntk\", \"factor\": 2}", "rope_scaling.type \"ntk\" is not a RoPE kind"},
      {"\"rope_scaling\": {\"type\": 3}", "rope_scaling.type 3 is not a string"},
      {"\"rope_scaling\": {\"type\": \"linear\", \"rope_type\": \"dynamic\", \"factor\": 2}",
       "rope_scaling.type \"linear\" differs from rope_type \"dynamic\""},
      {"\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, \"mscale\": 0.707}",
       "rope_parameters.mscale 0.707 is not a field shardgraph honours for rope_type \"yarn\""},
      {"\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, \"mscale_all_dim\": 1}",
       "rope_parameters.mscale_all_dim 1 is not a field"},
      {"\"rope_parameters\": {\"rope_type\": \"dynamic\", \"factor\": 2, \"original_max_position_embeddings\": 64}",
       "rope_parameters.original_max_position_embeddings 64 is not a field shardgraph honours for rope_type "
       "\"dynamic\""},
      {"\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2, \"low_freq_factor\": 1}",
       "rope_parameters.low_freq_factor 1 is not a field shardgraph honours for rope_type \"linear\""},
      {"\"rope_parameters\": {\"rope_type\": \"default\", \"factor\": 2}",
       "rope_parameters.factor 2 is not a field shardgraph honours for rope_type \"default\""},
      {"\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, "
       "\"high_freq_factor\": 4, \"beta_fast\": 32}",
       "rope_parameters.beta_fast 32 is not a field"},
      {"\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2, \"partial_rotary_factor\": 0.5}",
       "rope_parameters.partial_rotary_factor 0.5 rotates part of each head"},
      {"\"partial_rotary_factor\": 0.25", "config.json: partial_rotary_factor: partial_rotary_factor 0.25"},
      {"\"original_max_position_embeddings\": 64, \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4}",
       "original_max_position_embeddings 64 at the top level"},
      {"\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}, \"rope_parameters\": {\"rope_type\": \"linear\"}",
       "the config has both rope_scaling and rope_parameters"},
      {"\"rope_parameters\": \"linear\"", "rope_parameters is a string, not an object"},
      {"\"rope_theta\": 10000, \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500000}",
       "rope_parameters.rope_theta 500000 differs from the top-level rope_theta 10000"},
      {"\"rope_theta\": \"big\"", "rope_theta \"big\" is not a number"},
      {"\"rope_theta\": -5", "rope_theta -5 is not a positive number"},
      {"\"rope_parameters\": {\"rope_type\": \"linear\"}",
       "rope_parameters.factor: rope_type \"linear\" needs factor"},
      {"\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": \"2\"}",
       "rope_parameters.factor \"2\" is not a number"},
      {"\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": -2}", "factor -2 is not a positive number"},
      {"\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8, \"high_freq_factor\": 4}",
       "rope_type \"llama3\" needs low_freq_factor"},
      {"\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, "
       "\"high_freq_factor\": 1}",
       "low_freq_factor 4 and high_freq_factor 1 do not satisfy 0 < low < high"},
      {"\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, "
       "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 0}",
       "rope_parameters.original_max_position_embeddings 0 is not a positive integer"},
      {"\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, \"truncate\": 1}",
       "rope_parameters.truncate 1 is not a boolean"},
      {"\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, \"attention_factor\": 0}",
       "rope_parameters.attention_factor 0 is not positive"},
      {"\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, \"beta_fast\": -3}", "beta_fast -3"},
      {"\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 2, \"original_max_position_embeddings\": 64}",
       "rope_parameters.factor 2 differs from max_position_embeddings / original_max_position_embeddings = 4"},
      {"\"max_position_embeddings\": 0, \"rope_parameters\": {\"rope_type\": \"dynamic\", \"factor\": 2}",
       "max_position_embeddings 0 is not a positive integer"},
  };
  for (const auto& r : refused) {
    CAPTURE(r.fields);
    CHECK_THAT(refusal(r.fields), ContainsSubstring(r.message));
  }
}
