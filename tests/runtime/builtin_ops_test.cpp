// The built-in ops beyond GPT's (relu, quick_gelu, the erf GELU, permute) in tiny models, trained one step forward and
// backward on one rank and on dp=2 x tp=2 thread ranks; loss and every gradient equal one rank's
// (f64, relative 1e-9). The layout shards a dimension each op passes through (batch on dp, the hidden
// features on tp) and hands one op a Partial value it must gather (all_reduce) first.
#include <cmath>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "support/tiny_model.hpp"
#include "support/whole_gradients.hpp"

namespace sg = shardgraph;

namespace {

using test_support::gradient_map;

constexpr std::int64_t n_batch = 2, n_seq = 3, n_model = 4, n_ffn = 6, n_vocab = 5;

sg::model_sizes sizes() {
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, n_batch).set(sg::size_symbol::seq, n_seq).set(sg::size_symbol::vocab, n_vocab);
  s.set(sg::size_symbol::model, n_model).set(sg::size_symbol::ffn, n_ffn);
  return s;
}

sg::tensor_map inputs() {
  std::vector<double> x(n_batch * n_seq * n_model);
  std::vector<std::int64_t> targets(n_batch * n_seq);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.61 * static_cast<double>(i) + 0.2);
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int64_t>((i * 3 + 2) % n_vocab);
  sg::tensor_map m;
  m.emplace("x", sg::host_tensor::from<double>({n_batch, n_seq, n_model}, x));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({n_batch, n_seq}, targets));
  return m;
}

using test_support::tiny_model;  // the models' frame

// column-parallel linear: Shard<2> on tp -> relu, quick_gelu (pass through; one fused chain) ->
// row-parallel linear: Partial on tp -> gelu_erf (gathers: all_reduce).
constexpr sg::tensor activations_body(sg::tensor x, sg::tensor w_in, sg::tensor w_out) {
  auto h = sg::quick_gelu(sg::relu(sg::linear(x, w_in)));
  return sg::gelu(sg::linear(h, w_out), sg::gelu_approximation::erf);
}
constexpr sg::program activations = sg::compile<tiny_model<activations_body>, sg::training{}>();
static_assert(activations.count(sg::op::relu) == 1 && activations.count(sg::op::relu_grad) == 1);
static_assert(activations.count(sg::op::gelu_erf) == 1 && activations.count(sg::op::gelu_erf_grad) == 1);
static_assert(activations.count(sg::op::quick_gelu) == 1 && activations.count(sg::op::quick_gelu_grad) == 1);
static_assert(activations.count(sg::op::all_reduce, "tp") >= 1);  // gelu_erf's Partial input

// column-parallel linear: (batch, seq, ffn) Shard<2> on tp -> permute {2, 0, 1}: (ffn, batch, seq)
// Shard<0> on tp, Shard<1> on dp -> permute back -> row-parallel linear: Partial on tp ->
// transpose(0, 1): (seq, batch, model) still Partial -> transpose back -> + x.
constexpr sg::tensor permutes_body(sg::tensor x, sg::tensor w_in, sg::tensor w_out) {
  auto features_first = sg::permute(sg::linear(x, w_in), {2, 0, 1});
  auto h = sg::silu(sg::permute(features_first, {1, 2, 0}));
  auto seq_first = sg::transpose(sg::linear(h, w_out), 0, 1);
  return sg::transpose(seq_first, 1, 0) + x;
}
constexpr sg::program permuted = sg::compile<tiny_model<permutes_body>, sg::training{}>();
static_assert(permuted.count(sg::op::permute) == 8);  // four forward, four gradients

// Trains one step of p on one rank and on dp=2 x tp=2; checks that both give the same loss and
// gradients.
void check_equal_to_one_rank(const sg::program& p, std::size_t parameters) {
  double reference_loss = 0, loss = 0;
  const auto weights = sg::random_weights(11, 0.7);
  const gradient_map reference =
      test_support::whole_gradients(p, sizes(), {{"dp", 1}, {"tp", 1}}, weights, inputs(), &reference_loss);
  REQUIRE(reference.size() == parameters);
  const gradient_map got =
      test_support::whole_gradients(p, sizes(), {{"dp", 2}, {"tp", 2}}, weights, inputs(), &loss);
  CHECK(std::isfinite(reference_loss));
  CHECK(std::abs(loss - reference_loss) <= 1e-12 * std::abs(reference_loss));
  test_support::check_same_gradients(got, reference, 1e-9);
}

}  // namespace

TEST_CASE("built-in ops: relu, quick_gelu and gelu_erf train on dp=2 x tp=2 as on one rank",
          "[runtime][threads]") {
  check_equal_to_one_rank(activations, 3);
}

TEST_CASE("built-in ops: permute and transpose train on dp=2 x tp=2 as on one rank", "[runtime][threads]") {
  check_equal_to_one_rank(permuted, 3);
}
