// Training programs: the gradients of every parameter on dp x tp thread ranks equal one rank's
// (f64, relative 1e-9), for GPT-2 and LLaMA; and the autodiff pass emits the data-parallel
// gradient reductions that DESIGN §4 predicts.
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "support/whole_gradients.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::graph gpt2_sharded() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::graph gpt2_single() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f64, .data_axis = "", .tensor_axis = ""}); }
constexpr sg::graph llama_sharded() { return sg::models::llama<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::graph llama_single() { return sg::models::llama<Mesh>({.type = sg::dtype::f64, .data_axis = "", .tensor_axis = ""}); }

constexpr sg::program gpt2_train = sg::compile<gpt2_sharded, sg::training{}>();
constexpr sg::program gpt2_train_single = sg::compile<gpt2_single, sg::training{}>();
constexpr sg::program llama_train = sg::compile<llama_sharded, sg::training{}>();
constexpr sg::program llama_train_single = sg::compile<llama_single, sg::training{}>();

// One gradient per parameter (wte is tied: one gradient summing embedding and head).
static_assert(gpt2_train.count(sg::op::param_grad) == 20);
static_assert(gpt2_train_single.count(sg::step_kind::communicate) == 0);
// A Replicate weight meeting dp-sharded activations gets a Partial gradient: every one of GPT-2's
// 20 parameters is reduced over dp.
static_assert(gpt2_train.count(sg::op::all_reduce, "dp") >= 20);

constexpr std::int64_t batch = 4, seq = 8;
const sg::models::gpt2_config gpt2_tiny{.vocab = 64, .positions = 16, .model = 32, .heads = 4, .layers = 2};
const sg::models::llama_config llama_tiny{.vocab = 64, .model = 32, .ffn = 48, .heads = 8, .kv_heads = 4, .layers = 2};

sg::tensor_map token_inputs() {
  std::vector<std::int64_t> ids(batch * seq), targets(batch * seq);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>((i * 37 + 11) % 64);
    targets[i] = static_cast<std::int64_t>((i * 53 + 7) % 64);
  }
  sg::tensor_map m;
  m.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, targets));
  return m;
}

using test_support::gradient_map;

gradient_map gradients(const sg::program& p, const sg::model_sizes& sizes, int dp, int tp, double* loss) {
  return test_support::whole_gradients(p, sizes, {{"dp", dp}, {"tp", tp}}, sg::random_weights(5, 0.3), token_inputs(), loss);
}

void check_layouts(const sg::program& sharded, const sg::program& single, const sg::model_sizes& sizes) {
  double reference_loss = 0;
  gradient_map reference = gradients(single, sizes, 1, 1, &reference_loss);
  REQUIRE(reference.size() >= 10);
  for (auto [dp, tp] : {std::pair{1, 2}, {2, 1}, {2, 2}, {1, 4}}) {
    CAPTURE(dp, tp);
    double loss = 0;
    gradient_map got = gradients(sharded, sizes, dp, tp, &loss);
    CHECK(std::abs(loss - reference_loss) < 1e-12 * std::abs(reference_loss));
    REQUIRE(got.size() == reference.size());
    for (auto& [name, want] : reference) {
      CAPTURE(name);
      const test_support::gradient_difference d = test_support::difference(got.at(name), want);
      // Relative 1e-9, with an absolute floor for gradients that are zero in exact arithmetic and
      // rounding noise in practice: attention's key bias (softmax ignores a shift shared by all keys).
      CHECK(d.diff <= 1e-9 * d.scale + 1e-14);
    }
  }
}

}  // namespace

TEST_CASE("GPT-2 gradients: every dp x tp layout equals one rank", "[models][training][threads]") {
  check_layouts(gpt2_train, gpt2_train_single, gpt2_tiny.sizes(batch, seq));
}

TEST_CASE("LLaMA gradients: every dp x tp layout equals one rank", "[models][training][threads]") {
  check_layouts(llama_train, llama_train_single, llama_tiny.sizes(batch, seq));
}
