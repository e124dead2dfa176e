// Every layout equals one rank (DESIGN §6.1): GPT-2 and LLaMA (grouped-query attention) logits
// and loss on dp x tp thread ranks against an unsharded single-rank program, in f64 and f32.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;

template <sg::dtype T> constexpr sg::graph gpt2_sharded() { return sg::models::gpt2<Mesh>({.type = T}); }
template <sg::dtype T> constexpr sg::graph gpt2_single() {
  return sg::models::gpt2<Mesh>({.type = T, .data_axis = "", .tensor_axis = ""});
}
template <sg::dtype T> constexpr sg::graph llama_sharded() { return sg::models::llama<Mesh>({.type = T}); }
template <sg::dtype T> constexpr sg::graph llama_single() {
  return sg::models::llama<Mesh>({.type = T, .data_axis = "", .tensor_axis = ""});
}

constexpr sg::program gpt2_f64 = sg::compile<gpt2_sharded<sg::dtype::f64>>();
constexpr sg::program gpt2_f64_single = sg::compile<gpt2_single<sg::dtype::f64>>();
constexpr sg::program gpt2_f32 = sg::compile<gpt2_sharded<sg::dtype::f32>>();
constexpr sg::program gpt2_f32_single = sg::compile<gpt2_single<sg::dtype::f32>>();
constexpr sg::program llama_f64 = sg::compile<llama_sharded<sg::dtype::f64>>();
constexpr sg::program llama_f64_single = sg::compile<llama_single<sg::dtype::f64>>();
constexpr sg::program llama_f32 = sg::compile<llama_sharded<sg::dtype::f32>>();
constexpr sg::program llama_f32_single = sg::compile<llama_single<sg::dtype::f32>>();

// The unsharded programs hold no communication at all; the sharded GPT-2 block holds Megatron's
// two tensor-parallel all-reduces (attention, MLP) plus one for the vocab-parallel embedding, and
// the vocabulary-parallel loss two (its rows' statistics and sums).
static_assert(gpt2_f64_single.count(sg::step_kind::communicate) == 0);
static_assert(gpt2_f64.count(sg::op::all_reduce, "tp") == 5);
static_assert(llama_f64.count(sg::op::all_reduce, "tp") == 5);

constexpr std::int64_t batch = 4, seq = 16;
const sg::models::gpt2_config gpt2_tiny{.vocab = 96, .positions = 32, .model = 32, .heads = 4, .layers = 2};
const sg::models::llama_config llama_tiny{.vocab = 96, .model = 32, .ffn = 64, .heads = 8, .kv_heads = 4, .layers = 2};

sg::tensor_map token_inputs() {
  std::vector<std::int64_t> ids(batch * seq), targets(batch * seq);
  std::uint64_t s = 12345;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    ids[i] = static_cast<std::int64_t>((s >> 33) % 96);
    targets[i] = static_cast<std::int64_t>((s >> 17) % 96);
  }
  sg::tensor_map m;
  m.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, targets));
  return m;
}

// Runs `p` on dp*tp thread ranks; every rank's outputs must be identical; returns rank 0's.
sg::tensor_map run_layout(const sg::program& p, const sg::model_sizes& sizes, int dp, int tp) {
  sg::mesh_shape mesh{{"dp", dp}, {"tp", tp}};
  std::vector<sg::tensor_map> results(static_cast<std::size_t>(dp * tp));
  sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, mesh, sg::random_weights(7, 0.2));
    results[static_cast<std::size_t>(comm.rank())] = rank.forward(token_inputs());
  });
  for (std::size_t r = 1; r < results.size(); ++r)
    for (auto& [name, t] : results[0])
      for (std::int64_t i = 0; i < t.numel(); ++i) REQUIRE(results[r].at(name).at(i) == t.at(i));
  return results[0];
}

double relative_difference(const sg::host_tensor& a, const sg::host_tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::abs(a.at(i) - b.at(i)));
    scale = std::max(scale, std::abs(b.at(i)));
  }
  return diff / scale;
}

void check_layouts(const sg::program& sharded, const sg::program& single, const sg::model_sizes& sizes,
                   double tolerance) {
  sg::tensor_map reference = run_layout(single, sizes, 1, 1);
  REQUIRE(reference.at("logits").shape() == std::vector<std::int64_t>{batch, seq, 96});
  REQUIRE(std::isfinite(reference.at("loss").at(0)));
  REQUIRE(reference.at("loss").at(0) > 1.0);  // random weights: near log(96) ~ 4.6, never trivially 0
  for (int dp : {1, 2})
    for (int tp : {1, 2, 4}) {
      CAPTURE(dp, tp);
      sg::tensor_map got = run_layout(sharded, sizes, dp, tp);
      CHECK(relative_difference(got.at("logits"), reference.at("logits")) < tolerance);
      CHECK(relative_difference(got.at("loss"), reference.at("loss")) < tolerance);
    }
}

}  // namespace

TEST_CASE("GPT-2 forward: every dp x tp layout equals one rank", "[models][threads]") {
  SECTION("f64") { check_layouts(gpt2_f64, gpt2_f64_single, gpt2_tiny.sizes(batch, seq), 1e-10); }
  SECTION("f32") { check_layouts(gpt2_f32, gpt2_f32_single, gpt2_tiny.sizes(batch, seq), 1e-4); }
}

TEST_CASE("LLaMA forward with grouped-query attention: every dp x tp layout equals one rank", "[models][threads]") {
  SECTION("f64") { check_layouts(llama_f64, llama_f64_single, llama_tiny.sizes(batch, seq), 1e-10); }
  SECTION("f32") { check_layouts(llama_f32, llama_f32_single, llama_tiny.sizes(batch, seq), 1e-4); }
}
