// The built-in ops beyond GPT's (relu, the erf GELU) in a tiny model, trained one step forward and
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
#include "support/whole_gradients.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
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

// x (batch, seq, model) Shard<0> on dp -> column-parallel linear: h Shard<2> on tp -> relu (passes
// through) -> row-parallel linear: Partial on tp -> gelu_erf (gathers: all_reduce) -> the loss.
constexpr sg::graph activations_mlp() {
  using namespace sg::dim;
  sg::builder<Mesh> g(sg::dtype::f64);
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f64, sg::on<"dp">(sg::shard<0>));
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto w_in = g.param("w_in", {model, ffn}, sg::on<"tp">(sg::shard<1>));
  auto w_out = g.param("w_out", {ffn, model}, sg::on<"tp">(sg::shard<0>));
  auto head = g.param("head", {model, vocab});
  auto h = sg::relu(sg::linear(x, w_in));
  auto y = sg::gelu(sg::linear(h, w_out), sg::gelu_approximation::erf);
  sg::output(sg::cross_entropy(sg::linear(y, head), targets), "loss");
  return g.finish();
}
constexpr sg::program activations = sg::compile<activations_mlp, sg::training{}>();
static_assert(activations.count(sg::op::relu) == 1 && activations.count(sg::op::relu_grad) == 1);
static_assert(activations.count(sg::op::gelu_erf) == 1 && activations.count(sg::op::gelu_erf_grad) == 1);
static_assert(activations.count(sg::op::all_reduce, "tp") >= 1);  // gelu_erf's Partial input

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
  test_support::check_equal_gradients(got, reference, 1e-9);
}

}  // namespace

TEST_CASE("built-in ops: relu and gelu_erf train on dp=2 x tp=2 as on one rank", "[runtime][threads]") {
  check_equal_to_one_rank(activations, 3);
}
