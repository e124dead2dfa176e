// Mixed precision on thread ranks: bf16 and f16 models compute and communicate in 16 bits while the
// trainer keeps f32 master weights, gradient sums and AdamW moments.
//  - bf16 and f16 gradients, on every dp x tp layout, equal f64's within the 16-bit precision, and
//    bf16 training on every dp x tp x ZeRO layout follows the f64 loss curve. Layouts do not equal
//    one rank bitwise in 16 bits: partial sums are rounded before they are added, where one rank
//    rounds a whole sum once. (Weights are not compared element by element: AdamW's first steps
//    move each weight by about lr * sign(gradient), so a gradient that is zero in f64, such as the
//    key bias's, moves by a full lr in any rounded arithmetic.)
//  - f16 dynamic loss scaling: a scale that overflows skips the step on every rank (weights and the
//    AdamW step count untouched) and halves; finite steps grow it after growth_interval.
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "tiny_gpt2_training.hpp"

namespace sg = shardgraph;

namespace {

using namespace tiny_gpt2;

// The programs are compiled at run time (the same pipeline as compile<>), once each.
const sg::program& program_of(sg::dtype type, bool sharded, int zero_stage = 0) {
  static std::map<std::tuple<sg::dtype, bool, int>, std::unique_ptr<sg::program>> cache;
  auto& p = cache[{type, sharded, zero_stage}];
  if (!p) {
    const sg::graph g = sharded ? sg::models::gpt2<Mesh>({.type = type})
                                : sg::models::gpt2<Mesh>({.type = type, .data_axis = "", .tensor_axis = ""});
    p = std::make_unique<sg::program>(sg::compile_graph(g, sg::training{.zero_stage = zero_stage}));
    REQUIRE(p->ok());
  }
  return *p;
}

}  // namespace

TEST_CASE("mixed precision: the loss is f32 and the gradients bf16 in a bf16 program",
          "[runtime][training]") {
  const sg::program& p = program_of(sg::dtype::bf16, true);
  int losses = 0, bf16_gradients = 0;
  for (int i = 0; i < p.nodes.size(); ++i) {
    const sg::node& n = p.nodes[i];
    if (n.kind == sg::op::cross_entropy) {
      CHECK(n.type == sg::dtype::f32);
      ++losses;
    }
    if (n.kind == sg::op::param_grad && n.type == sg::dtype::bf16) ++bf16_gradients;
  }
  CHECK(losses == 1);
  CHECK(bf16_gradients == 20);
}

namespace {

// Every parameter's gradient after one forward and backward on dp x tp ranks, assembled whole.
weights gradients(const sg::program& p, int dp, int tp) {
  weights whole;
  std::mutex m;
  sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, config.sizes(batch, seq), comm, sg::cpu::backend{},
                         sg::mesh_shape{{"dp", dp}, {"tp", tp}}, sg::random_weights(3, 0.3));
    rank.forward(tokens(batch, 0, 0));
    auto parts = rank.gradients();
    std::lock_guard lock(m);
    add_slices(parts, whole);
  });
  return whole;
}

// |a - b| / |b| over all parameters together (L2 norms).
double relative_error(const weights& a, const weights& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, norm = 0;
  for (auto& [name, want] : b) {
    const std::vector<double>& have = a.at(name);
    for (std::size_t i = 0; i < want.size(); ++i) {
      diff += (have[i] - want[i]) * (have[i] - want[i]);
      norm += want[i] * want[i];
    }
  }
  return std::sqrt(diff / norm);
}

}  // namespace

// Measured (tiny GPT-2, relative L2 error of all gradients against f64): f32 6e-7, f16 1.8e-3,
// bf16 1.5e-2, about what 8 and 11 significant bits give over a few roundings per value.
TEST_CASE("mixed precision: bf16 and f16 gradients equal f64's within their precision, on every layout",
          "[runtime][training][threads]") {
  const weights exact = gradients(program_of(sg::dtype::f64, false), 1, 1);
  for (auto [type, tolerance] : {std::pair{sg::dtype::bf16, 3e-2}, {sg::dtype::f16, 5e-3}}) {
    CAPTURE(sg::dtype_name(type));
    const double one_rank = relative_error(gradients(program_of(type, false), 1, 1), exact);
    CAPTURE(one_rank);
    CHECK(one_rank < tolerance);
    CHECK(one_rank > tolerance / 30);  // the values really are rounded to 16 bits
    for (auto [dp, tp] : {std::pair{2, 1}, {1, 2}, {2, 2}, {4, 1}}) {
      CAPTURE(dp, tp);
      CHECK(relative_error(gradients(program_of(type, true), dp, tp), exact) < tolerance);
    }
  }
}

// Measured: over 8 steps the bf16 loss stays within 0.6% of the f64 loss on one rank and on 2 x 2
// ranks under ZeRO-3, while the loss falls from 4.5 to 0.75.
TEST_CASE("mixed precision: every bf16 dp x tp x ZeRO layout trains like f64 within bf16's precision",
          "[runtime][training][threads]") {
  constexpr int steps = 8;
  std::vector<sg::step_report> exact;
  train(program_of(sg::dtype::f64, false), 1, 1, steps, 1, &exact);
  REQUIRE(exact.back().loss < exact.front().loss / 4);  // it learns
  auto check_follows = [&](const std::vector<sg::step_report>& got) {
    REQUIRE(got.size() == exact.size());
    for (std::size_t s = 0; s < got.size(); ++s) {
      CAPTURE(s, got[s].loss, exact[s].loss);
      CHECK(std::abs(got[s].loss - exact[s].loss) < 0.015 * exact[s].loss);
      CHECK(std::abs(got[s].grad_norm - exact[s].grad_norm) < 0.1 * exact[s].grad_norm);
      CHECK_FALSE(got[s].skipped);
    }
  };
  std::vector<sg::step_report> one_rank;
  train(program_of(sg::dtype::bf16, false), 1, 1, steps, 1, &one_rank);
  check_follows(one_rank);
  for (int zero : {0, 1, 2, 3})
    for (auto [dp, tp] : {std::pair{2, 1}, {2, 2}, {4, 1}}) {
      CAPTURE(zero, dp, tp);
      std::vector<sg::step_report> got;
      train(program_of(sg::dtype::bf16, true, zero), dp, tp, steps, 1, &got);
      check_follows(got);
    }
  std::vector<sg::step_report> micro;  // two micro-batches accumulate into the f32 sums
  train(program_of(sg::dtype::bf16, true, 2), 2, 2, steps, 2, &micro);
  check_follows(micro);
}

TEST_CASE("mixed precision: f16 loss scaling skips overflowing steps on every rank and backs off",
          "[runtime][training][threads]") {
  sg::training_options o = options;
  o.loss_scaler.scale = 0x1p40;  // d loss = 2^40 overflows f16 (largest: 65504) at once
  o.loss_scaler.growth_interval = 2;
  const weights initial = train(program_of(sg::dtype::f16, false), 1, 1, 0, 1, nullptr, o);
  std::vector<sg::step_report> one_rank, sharded;
  const weights after_one = train(program_of(sg::dtype::f16, false), 1, 1, 1, 1, nullptr, o);
  CHECK(max_relative_difference(after_one, initial) == 0);  // the skipped step changed nothing
  const weights trained = train(program_of(sg::dtype::f16, false), 1, 1, 40, 1, &one_rank, o);
  const weights trained_sharded = train(program_of(sg::dtype::f16, true, 2), 2, 2, 40, 1, &sharded, o);
  REQUIRE(one_rank.size() == 40);
  CHECK(one_rank[0].skipped);
  CHECK(one_rank[0].loss_scale == 0x1p40);
  int skipped = 0, grown = 0;
  for (std::size_t s = 0; s < one_rank.size(); ++s) {
    CAPTURE(s, one_rank[s].loss_scale);
    skipped += one_rank[s].skipped;
    if (s > 0) {
      if (one_rank[s - 1].skipped) CHECK(one_rank[s].loss_scale == one_rank[s - 1].loss_scale / 2);
      if (one_rank[s].loss_scale > one_rank[s - 1].loss_scale) {  // grown after 2 finite steps
        ++grown;
        REQUIRE(s >= 2);
        CHECK(one_rank[s].loss_scale == 2 * one_rank[s - 1].loss_scale);
        CHECK((!one_rank[s - 1].skipped && !one_rank[s - 2].skipped));
      }
    }
    // The 2 x 2 layout takes the same decisions: all its ranks saw the overflow.
    CHECK(sharded[s].skipped == one_rank[s].skipped);
    CHECK(sharded[s].loss_scale == one_rank[s].loss_scale);
  }
  CHECK(skipped >= 10);  // 2^40 halves below 2^16 / max |d logits| before any step is taken
  CHECK(skipped < 40);   // and then training goes on
  CHECK(grown >= 1);     // finite steps double the scale every 2 steps until it overflows again
  CHECK(max_relative_difference(trained, initial) > 0.01);
  // Once steps are taken, both layouts learn alike.
  CHECK(one_rank.back().loss < one_rank.front().loss / 2);
  CHECK(std::abs(sharded.back().loss - one_rank.back().loss) < 0.02 * one_rank.back().loss);
}

TEST_CASE("mixed precision: bf16 halves the parameters and adds f32 master weights",
          "[runtime][training][threads]") {
  auto memory = [](const sg::program& p, int dp) {
    std::pair<std::int64_t, sg::optimizer_memory> m;
    sg::threads::world(dp).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(p, config.sizes(batch, seq), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}},
                           sg::random_weights());
      sg::trainer t(rank, options);
      t.step(tokens(batch, 0, 0));
      if (comm.rank() == 0) m = {rank.memory().parameters, t.memory()};
    });
    return m;
  };
  const auto [f32_parameters, f32_optimizer] = memory(program_of(sg::dtype::f32, true), 1);
  const auto [bf16_parameters, bf16_optimizer] = memory(program_of(sg::dtype::bf16, true), 1);
  CHECK(bf16_parameters * 2 == f32_parameters);
  CHECK(f32_optimizer.master_weights == 0);
  CHECK(bf16_optimizer.master_weights == f32_parameters);  // one f32 copy of every weight
  CHECK(bf16_optimizer.optimizer_states == f32_optimizer.optimizer_states);
  CHECK(bf16_optimizer.gradient_sums == f32_optimizer.gradient_sums);
  // ZeRO-1 over 4 ranks: the master is sharded with the moments.
  const auto [zero_parameters, zero_optimizer] = memory(program_of(sg::dtype::bf16, true, 1), 4);
  CHECK(zero_optimizer.master_weights * 4 >= f32_parameters);
  CHECK(zero_optimizer.master_weights * 4 <= f32_parameters + 36 * 4 * 4 * 4);
  CHECK(zero_parameters == bf16_parameters);
}

namespace {
// The logits' gradient written by its own step, not by the loss's call.
const sg::memory_options gradient_apart_from_loss{
    .fusion = sg::compute::fused_set::all().without({sg::compute::fused::loss_with_gradient})};
}  // namespace

TEST_CASE(
    "mixed precision: under a loss scale the loss and the logits' gradient run apart, as a backend "
    "without them in one call does",
    "[runtime][training][threads]") {
  // The loss's call writes the gradient for a loss gradient of 1; under a scale the executor hands
  // it no gradient and runs the gradient's step, which multiplies by the scale as it rounds.
  sg::training_options o = options;
  o.loss_scaler.scale = 0x1p8;  // finite from the first step: every step updates
  const sg::program& p = program_of(sg::dtype::f16, false);
  std::vector<sg::step_report> with, apart;
  const weights together = train(p, 1, 1, 3, 1, &with, o);
  const weights alone =
      train_on([] { return sg::cpu::backend{}; }, p, 1, 1, 3, 1, &apart, o, gradient_apart_from_loss);
  REQUIRE(with.size() == 3);
  CHECK_FALSE(with[0].skipped);
  CHECK(together == alone);
}
