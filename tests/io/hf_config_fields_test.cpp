// Every field of transformers' GPT2Config and LlamaConfig (transformers_config_fields.hpp, made by
// tests/golden/config_fields.py) is classified by io/hf_config_fields.hpp, and each class is
// checked here on the golden cases' config.json files:
//   honoured      a golden case sets it (golden_test.cpp compares that case with HF transformers),
//                 to another value than the family's own case where the field names another case;
//                 a value the model does not implement (the row's example) is refused, by name
//   no_effect     the example value is accepted and gives the same sizes and options
//   neutral_only  the accepted values load; the example is refused, naming the field and value
// A field a newer transformers adds fails the first check until it is classified.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>

#include <shardgraph/io/hf_config.hpp>
#include <shardgraph/io/hf_config_fields.hpp>

#include "catch.hpp"
#include "transformers_config_fields.hpp"

namespace sg = shardgraph;

namespace {

const std::string golden_dir = SHARDGRAPH_GOLDEN_DIR;

// The cases golden_test.cpp compares with HF transformers.
constexpr std::string_view golden_cases[] = {"gpt2",
                                             "llama",
                                             "gpt2_untied",
                                             "gpt2_unscaled",
                                             "llama_tied_bias_headdim",
                                             "llama_rope_linear",
                                             "llama_rope_yarn"};

std::string config_of(std::string_view golden_case) {
  return golden_dir + "/" + std::string(golden_case) + "/config.json";
}

// `base` (a config.json) with `key` set to `value` (compact JSON), written to a scratch file.
std::string with_field(const std::string& base, std::string_view key, std::string_view value) {
  const sg::io::json::value config = sg::io::read_json_file(base);
  std::string text = "{";
  bool replaced = false;
  for (const auto& [k, v] : config.as_object()) {
    if (text.size() > 1) text += ", ";
    replaced = replaced || k == key;
    text += sg::io::json::quote(k) + ": " + (k == key ? std::string(value) : sg::io::json_text(v));
  }
  if (!replaced) text += ", " + sg::io::json::quote(key) + ": " + std::string(value);
  const auto path =
      std::filesystem::temp_directory_path() / ("shardgraph-config-" + std::string(key) + ".json");
  std::ofstream(path) << text << "}";
  return path.string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const sg::error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// Reads `path` as `family` with the options it implies; the sizes and options as one comparable text.
std::string read_config(std::string_view family, const std::string& path) {
  if (family == "gpt2") {
    const sg::models::gpt2_options o = sg::io::hf_gpt2_options(path);
    const sg::models::gpt2_config c = sg::io::hf_gpt2_config(path, o);
    return std::to_string(c.vocab) + " " + std::to_string(c.positions) + " " + std::to_string(c.model) + " " +
           std::to_string(c.heads) + " " + std::to_string(c.layers) + " " + std::to_string(c.ffn) + " " +
           std::to_string(o.layer_norm_eps) + " " + std::to_string(o.tie_word_embeddings);
  }
  const sg::models::llama_options o = sg::io::hf_llama_options(path);
  const sg::models::llama_config c = sg::io::hf_llama_config(path, o);
  return std::to_string(c.vocab) + " " + std::to_string(c.model) + " " + std::to_string(c.ffn) + " " +
         std::to_string(c.heads) + " " + std::to_string(c.kv_heads) + " " + std::to_string(c.layers) + " " +
         std::to_string(c.head_dim) + " " + std::to_string(o.rms_norm_eps) + " " +
         std::to_string(o.rope.theta) + " " + std::to_string(o.tie_word_embeddings) +
         std::to_string(o.attention_bias) + std::to_string(o.mlp_bias);
}

void check_field(std::string_view family, const sg::io::config_field& f, bool in_transformers) {
  CAPTURE(family, f.name);
  const std::string base = config_of(family);
  switch (f.treatment) {
    case sg::io::field_treatment::honoured: {
      if (in_transformers) {
        const std::string_view golden_case = f.golden.empty() ? family : f.golden;
        CHECK(std::find(std::begin(golden_cases), std::end(golden_cases), golden_case) !=
              std::end(golden_cases));
        const sg::io::json::value config = sg::io::read_json_file(config_of(golden_case));
        REQUIRE(config.find(f.name) != nullptr);
        if (!f.golden.empty()) {  // the option case sets what the family's own case does not
          const sg::io::json::value own = sg::io::read_json_file(base);
          const sg::io::json::value* default_value = own.find(f.name);
          CHECK((default_value == nullptr ||
                 sg::io::json_text(*default_value) != sg::io::json_text(*config.find(f.name))));
        }
      }
      if (!f.example.empty())
        CHECK(contains(error_of([&] { read_config(family, with_field(base, f.name, f.example)); }), f.name));
      break;
    }
    case sg::io::field_treatment::no_effect:
      REQUIRE_FALSE(f.example.empty());
      CHECK(read_config(family, with_field(base, f.name, f.example)) == read_config(family, base));
      break;
    case sg::io::field_treatment::neutral_only: {
      REQUIRE_FALSE(f.example.empty());
      const std::string message = error_of([&] { read_config(family, with_field(base, f.name, f.example)); });
      CHECK(contains(message, "shardgraph: "));
      CHECK(contains(
          message, "\"" + std::string(f.name) + "\": " + sg::io::json_text(sg::io::json::parse(f.example))));
      for (std::string_view accepted = f.accepted; !accepted.empty();) {
        const std::size_t bar = accepted.find('|');
        CHECK(read_config(family, with_field(base, f.name, accepted.substr(0, bar))) ==
              read_config(family, base));
        accepted = bar == std::string_view::npos ? std::string_view{} : accepted.substr(bar + 1);
      }
      break;
    }
  }
}

template <std::size_t N>
void check_family(std::string_view family, const std::string_view (&transformers_fields)[N]) {
  CAPTURE(transformers_version);
  for (std::string_view name : transformers_fields) {
    CAPTURE(name);
    const sg::io::config_field* f = sg::io::find_config_field(family, name);
    INFO("a field of transformers' config class that hf_config_fields.hpp does not classify");
    REQUIRE(f != nullptr);
    check_field(family, *f, true);
  }
  // the fields of older transformers, still in published config.json files
  const auto in_transformers = [&](std::string_view name) {
    return std::find(std::begin(transformers_fields), std::end(transformers_fields), name) !=
           std::end(transformers_fields);
  };
  for (const sg::io::config_field& f : sg::io::family_config_fields(family))
    if (!in_transformers(f.name)) check_field(family, f, false);
  for (const sg::io::config_field& f : sg::io::detail::common_config_fields)
    if (!in_transformers(f.name)) check_field(family, f, false);
}

}  // namespace

TEST_CASE("every GPT2Config field is honoured, accepted without effect, or refused by name", "[io][config]") {
  check_family("gpt2", gpt2_config_fields);
}

TEST_CASE("every LlamaConfig field is honoured, accepted without effect, or refused by name",
          "[io][config]") {
  check_family("llama", llama_config_fields);
}

TEST_CASE("a config.json field shardgraph does not know is refused, naming it and its value",
          "[io][config]") {
  for (std::string_view family : {"gpt2", "llama"}) {
    CAPTURE(family);
    const std::string message = error_of(
        [&] { read_config(family, with_field(config_of(family), "quantization_config", "{\"bits\": 4}")); });
    CHECK(contains(message,
                   "config.json: quantization_config: \"quantization_config\": {\"bits\": 4} is not a"));
  }
}

TEST_CASE("RoPE scaling is read in both spellings; a kind not implemented is refused", "[io][config]") {
  const std::string base = config_of("llama");
  CHECK(contains(error_of([&] {
                   read_config("llama", with_field(base, "rope_scaling", "{\"rope_type\": \"llama3\"}"));
                 }),
                 "rope_scaling"));
  CHECK(contains(error_of([&] {
                   read_config("llama", with_field(base, "rope_parameters",
                                                   "{\"rope_type\": \"longrope\", \"rope_theta\": 10000.0}"));
                 }),
                 "rope_parameters.rope_type \"longrope\" is not a RoPE kind"));
  const std::string yarn =
      with_field(base, "rope_parameters", "{\"rope_type\": \"yarn\", \"rope_theta\": 10000.0, \"factor\": 4.0}");
  CHECK(sg::io::hf_llama_options(yarn).rope.type == sg::rope_type::yarn);
  CHECK(read_config("llama", with_field(base, "rope_scaling", "null")) == read_config("llama", base));
}

TEST_CASE("a LLaMA head_dim sets the head size, independent of hidden_size / heads", "[io][config]") {
  const std::string base = config_of("llama");
  const sg::models::llama_config c = sg::io::hf_llama_config(with_field(base, "head_dim", "12"));
  CHECK(c.head_dim == 12);
  CHECK(c.sizes(1, 2).get(sg::size_symbol::head_dim) == 12);
  CHECK(sg::io::hf_llama_config(with_field(base, "head_dim", "null"))
            .sizes(1, 2)
            .get(sg::size_symbol::head_dim) == c.model / c.heads);
  CHECK(contains(error_of([&] { sg::io::hf_llama_config(with_field(base, "head_dim", "0")); }), "head_dim"));
}

TEST_CASE("GPT-2 reorder_and_upcast_attn is accepted in f32 and f64 programs, refused in 16-bit ones",
          "[io][config]") {
  const std::string upcast = with_field(config_of("gpt2"), "reorder_and_upcast_attn", "true");
  for (sg::dtype type : {sg::dtype::f32, sg::dtype::f64}) {
    CAPTURE(sg::dtype_name(type));
    CHECK(error_of([&] {
            sg::io::hf_gpt2_config(upcast, sg::io::hf_gpt2_options(upcast, {.type = type}));
          }).empty());
  }
  for (sg::dtype type : {sg::dtype::bf16, sg::dtype::f16}) {
    CAPTURE(sg::dtype_name(type));
    const std::string message =
        error_of([&] { sg::io::hf_gpt2_config(upcast, sg::io::hf_gpt2_options(upcast, {.type = type})); });
    CHECK(contains(
        message,
        "reorder_and_upcast_attn: \"reorder_and_upcast_attn\": true asks for attention scores in float32"));
    CHECK(error_of([&] {
            const std::string plain = config_of("gpt2");
            sg::io::hf_gpt2_config(plain, sg::io::hf_gpt2_options(plain, {.type = type}));
          }).empty());
  }
}
