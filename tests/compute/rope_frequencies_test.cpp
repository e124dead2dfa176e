// compute::make_rope_frequencies against values worked out by hand from HF transformers' formulas
// (modeling_rope_utils.py), and against HF's own tables for the configs of
// tests/golden/llama_rope_tables/tables.json (made by make_golden.py), read through io::hf_rope_scaling.
#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include <shardgraph/compute/rope_frequencies.hpp>
#include <shardgraph/io/hf_rope.hpp>
#include <shardgraph/io/json.hpp>

#include "catch.hpp"

namespace sg = shardgraph;
using sg::rope_type;
using sg::testing::ContainsSubstring;

namespace {

std::vector<double> table_of(const sg::rope_scaling& s, std::int64_t head_dim, std::int64_t seq) {
  const sg::compute::rope_frequencies t = sg::compute::make_rope_frequencies(s, head_dim, seq);
  REQUIRE(t.pairs == head_dim / 2);
  return {t.inverse_frequency, t.inverse_frequency + t.pairs};
}

double relative_difference(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
  return worst;
}


}  // namespace

TEST_CASE("rope frequency tables equal the values worked out by hand for each kind", "[compute]") {
  // head_dim 8, theta 10000: unscaled 10000^(-i/4) = {1, 0.1, 0.01, 0.001}, wavelengths 2 pi / f.
  const std::vector<double> base = {1, 0.1, 0.01, 0.001};
  CHECK(relative_difference(table_of({}, 8, 5), base) < 1e-15);
  CHECK(relative_difference(table_of({.type = rope_type::linear, .factor = 2}, 8, 5), {0.5, 0.05, 0.005, 0.0005}) <
        1e-15);

  // dynamic, head_dim 4, factor 2, max positions 8: theta * (2 * L / 8 - 1)^(4 / 2) for L = max(seq, 8)
  const sg::rope_scaling dynamic{.type = rope_type::dynamic, .factor = 2, .original_max_positions = 8};
  CHECK(relative_difference(table_of(dynamic, 4, 8), {1, 0.01}) < 1e-15);
  CHECK(relative_difference(table_of(dynamic, 4, 3), {1, 0.01}) < 1e-15);
  CHECK(relative_difference(table_of(dynamic, 4, 16), {1, 1 / std::sqrt(10000.0 * 9)}) < 1e-15);

  // llama3, factor 8, original 1000, low 1 and high 4: wavelengths under 250 kept (6.3, 63), over 1000
  // divided (6283), 628 blended with smooth = (1000 / 628.3 - 1) / 3
  const double smooth = (1000 / (2 * std::numbers::pi / 0.01) - 1) / 3;
  CHECK(relative_difference(table_of({.type = rope_type::llama3,
                                      .factor = 8,
                                      .original_max_positions = 1000,
                                      .low_freq_factor = 1,
                                      .high_freq_factor = 4},
                                     8, 5),
                            {1, 0.1, (1 - smooth) * 0.01 / 8 + smooth * 0.01, 0.001 / 8}) < 1e-14);

  // yarn, factor 4, original 64, betas 32 and 1: correction dims 8 ln(64 / (2 pi r)) / (2 ln 10000) are
  // -0.497 (r = 32) and 1.008 (r = 1), truncated to [0, 2]: ramp {0, 0.5, 1, 1} from f to f / 4
  const sg::rope_scaling yarn{.type = rope_type::yarn, .factor = 4, .original_max_positions = 64};
  const sg::compute::rope_frequencies t = sg::compute::make_rope_frequencies(yarn, 8, 5);
  CHECK(relative_difference({t.inverse_frequency, t.inverse_frequency + 4}, {1, 0.0625, 0.0025, 0.00025}) < 1e-14);
  CHECK(t.attention_factor == Approx(0.1 * std::log(4.0) + 1).epsilon(1e-15));
  // not truncated: the ramp runs over [0, 1.008]
  const double high = 8 * std::log(64 / (2 * std::numbers::pi)) / (2 * std::log(10000.0));
  const double ramp = 1 / high;
  sg::rope_scaling untruncated = yarn;
  untruncated.truncate = false;
  CHECK(relative_difference(table_of(untruncated, 8, 5), {1, 0.1 * (1 - ramp) + 0.025 * ramp, 0.0025, 0.00025}) <
        1e-14);
  sg::rope_scaling given = yarn;
  given.attention_factor = 1.5;
  CHECK(sg::compute::make_rope_frequencies(given, 8, 5).attention_factor == 1.5);
}

TEST_CASE("rope frequency tables equal HF transformers' for configs of every kind and spelling", "[compute][io]") {
  const std::string path = std::string(SHARDGRAPH_GOLDEN_DIR) + "/llama_rope_tables/tables.json";
  std::ifstream file(path);
  REQUIRE(file);
  std::stringstream text;
  text << file.rdbuf();
  const sg::io::json::value tables = sg::io::json::parse(text.str(), path);
  const auto& cases = tables.at("cases").as_array();
  REQUIRE(cases.size() >= 9);
  for (const auto& c : cases) {
    CAPTURE(c.at("name").as_string());
    const sg::rope_scaling s = sg::io::hf_rope_scaling(c.at("config"), path);
    const sg::compute::rope_frequencies t =
        sg::compute::make_rope_frequencies(s, c.at("head_dim").as_int(), c.at("seq").as_int());
    std::vector<double> hf;
    for (const auto& f : c.at("inv_freq").as_array()) hf.push_back(f.as_double());
    // HF computes its tables in float32
    CHECK(relative_difference({t.inverse_frequency, t.inverse_frequency + t.pairs}, hf) < 2e-6);
    CHECK(t.attention_factor == Approx(c.at("attention_scaling").as_double()).epsilon(1e-12));
  }
}

TEST_CASE("rope frequency tables refuse sizes and numbers that give no finite table", "[compute]") {
  using sg::compute::make_rope_frequencies;
  CHECK_THAT(sg::testing::error_of([] { make_rope_frequencies({}, 7, 4, "rope 'q'"); }),
             ContainsSubstring("shardgraph: rope 'q': head_dim 7 is not an even number from 2 to 512"));
  CHECK_THAT(sg::testing::error_of([] { make_rope_frequencies({}, 1024, 4); }), ContainsSubstring("head_dim 1024"));
  CHECK_THAT(sg::testing::error_of([] { make_rope_frequencies({.theta = -1}, 8, 4); }),
             ContainsSubstring("rope_theta -1 is not a positive number"));
  CHECK_THAT(sg::testing::error_of([] { make_rope_frequencies({.type = rope_type::linear, .factor = 0}, 8, 4); }),
             ContainsSubstring("rope_type \"linear\": factor 0 is not a positive number"));
  CHECK_THAT(sg::testing::error_of([] { make_rope_frequencies({.type = rope_type::dynamic, .factor = 2}, 8, 4); }),
             ContainsSubstring("rope_type \"dynamic\": max_position_embeddings 0 is not positive"));
  CHECK_THAT(sg::testing::error_of([] {
               make_rope_frequencies({.type = rope_type::dynamic, .factor = 2, .original_max_positions = 4}, 2, 4);
             }),
             ContainsSubstring("head_dim 2 leaves no exponent"));
  CHECK_THAT(sg::testing::error_of([] {
               make_rope_frequencies({.type = rope_type::llama3,
                                      .factor = 8,
                                      .original_max_positions = 64,
                                      .low_freq_factor = 4,
                                      .high_freq_factor = 4},
                                     8, 4);
             }),
             ContainsSubstring("low_freq_factor 4 and high_freq_factor 4 do not satisfy 0 < low < high"));
  CHECK_THAT(sg::testing::error_of([] {
               make_rope_frequencies({.type = rope_type::yarn, .factor = 4, .original_max_positions = 64, .beta_fast = -1},
                                     8, 4);
             }),
             ContainsSubstring("beta_fast -1"));
  CHECK_THAT(sg::testing::error_of([] {
               make_rope_frequencies({.type = rope_type::yarn, .theta = 1, .factor = 4, .original_max_positions = 64}, 8, 4);
             }),
             ContainsSubstring("rope_theta 1 gives no correction range"));
}
