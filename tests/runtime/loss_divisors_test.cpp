// loss_divisors: a mean cross_entropy divides by the targets counted in the run (or the step the
// trainer gives), a sum by 1; the ids are checked against the vocabulary first.
// Program: logits (batch 2, seq 3, vocab 5) and targets (2, 3) inputs, a mean and a sum loss.
#include <shardgraph/plan/kernel_dims.hpp>
#include <shardgraph/runtime/loss_divisors.hpp>

#include <string>
#include <vector>

#include "../passes/test_models.hpp"
#include "catch.hpp"

namespace sg = shardgraph;

namespace {

constexpr sg::graph two_losses() {
  using namespace sg::dim;
  sg::builder<test_models::Mesh> g;
  auto logits = g.input("logits", {batch, seq, vocab}, sg::dtype::f32);
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i32);
  sg::output(sg::cross_entropy(logits, targets), "mean");
  sg::output(sg::cross_entropy(logits, targets, {.reduction = sg::loss_reduction::sum}), "sum");
  return g.finish();
}
constexpr sg::program program = sg::compile_graph(two_losses());

struct bound {
  sg::local_layout layout;
  sg::loss_divisors divisors;
  sg::model_sizes sizes;
  int mean = -1, sum = -1;  // the two cross_entropy nodes
};
bound bind_divisors() {
  const sg::graph& g = program.nodes;
  sg::model_sizes sizes;
  sizes.set(sg::size_symbol::batch, 2).set(sg::size_symbol::seq, 3).set(sg::size_symbol::vocab, 5);
  const sg::mesh_shape mesh{{"dp", 1}, {"tp", 1}};
  bound b{sg::local_layout(program, sizes, mesh, mesh.coordinates(g.axes, 0)), {}, sizes};
  b.divisors = sg::loss_divisors(g, b.layout, sizes);
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == sg::op::cross_entropy) (g[i].reduction == sg::loss_reduction::sum ? b.sum : b.mean) = i;
  REQUIRE(b.mean >= 0);
  REQUIRE(b.sum >= 0);
  return b;
}
// The divisor the run gives the mean loss's call: its entry among this run's counts.
std::int64_t mean_divisor(const bound& b) {
  const int k = b.divisors.entries()[static_cast<std::size_t>(b.mean)];
  REQUIRE(k >= 0);
  return b.divisors.current()[static_cast<std::size_t>(k)];
}
sg::tensor_map batch(std::vector<std::int32_t> targets) {
  return {{"targets", sg::host_tensor::from<std::int32_t>({2, 3}, targets)}};
}

}  // namespace

TEST_CASE("loss_divisors: the run's counted targets, the trainer's step counts, 1 for a sum", "[runtime]") {
  REQUIRE(program.ok());
  bound b = bind_divisors();
  const sg::graph& g = program.nodes;
  const std::vector<std::int64_t> counted = b.divisors.counted_targets(g, batch({0, 1, -100, 4, 2, 3}));
  REQUIRE(counted.size() == 2);          // one count per cross_entropy reading the targets input
  CHECK(counted[0] + counted[1] == 10);  // 5 of 6 counted, for each loss

  b.divisors.begin_run(counted);
  CHECK(mean_divisor(b) == 5);
  CHECK(sg::plan::kernel_dims(program, b.layout, b.sizes, b.sum)[3] == 1);  // a sum's, fixed at bind

  b.divisors.set_step_targets({12, 12});  // the step's counts, over its micro-batches
  b.divisors.begin_run(counted);
  CHECK(mean_divisor(b) == 12);
  b.divisors.set_step_targets({12});  // counts of another program's shape: the run's own
  b.divisors.begin_run(counted);
  CHECK(mean_divisor(b) == 5);
  b.divisors.clear_step_targets();
  b.divisors.begin_run({3, 3});
  CHECK(mean_divisor(b) == 3);
  CHECK(b.divisors.current() == std::vector<std::int64_t>{3, 3});
}

TEST_CASE("loss_divisors: micro-batches' counts are summed, every one checked", "[runtime]") {
  bound b = bind_divisors();
  const sg::graph& g = program.nodes;
  const std::vector<sg::tensor_map> micro{batch({0, 1, 2, 3, 4, 0}), batch({-100, -100, 1, 1, 1, 1})};
  CHECK(b.divisors.counted_targets(g, micro) == std::vector<std::int64_t>{10, 10});
  const std::vector<sg::tensor_map> bad{batch({0, 1, 2, 3, 4, 0}), batch({0, 0, 5, 0, 0, 0})};
  CHECK_THROWS_WITH(
      b.divisors.counted_targets(g, bad),
      sg::testing::ContainsSubstring("target 5 at batch row 0, position 2 is outside the vocabulary [0, 5)"));
}
