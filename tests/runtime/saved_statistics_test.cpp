// Statistics saved for the backward (fused::attention_saved, cross_entropy_saved): buffers the plan
// allocates with the value they go with. A cpu backend running them as a GPU does
// (support/cpu_checking_saved_statistics.hpp) writes them in each forward and compares them in each
// backward, on layouts where the values are kept per layer, recomputed, banked per micro-batch of a
// pipeline, or run under a loss scale; training equals the plain cpu backend's.
#include <mutex>
#include <vector>

#include "catch.hpp"
#include "support/cpu_checking_saved_statistics.hpp"
#include "tiny_gpt2_training.hpp"

namespace sg = shardgraph;

namespace {

using namespace tiny_gpt2;
using Mesh3 = sg::mesh<"dp", "tp", "pp">;

struct layout {
  int dp = 1, tp = 1, pp = 1;
};

struct run {
  weights trained;
  sg::testing::saved_statistics_checks checks;
};

// Trains 2 steps of `micro` micro-batches on the layout with a checking backend (`checking`) or the
// plain cpu backend, and returns the weights and rank 0's checks.
run train(const sg::program& p, layout l, bool checking, const sg::pipeline_options& pipe = {},
          const sg::training_options& o = options) {
  run result;
  std::mutex m;
  const int micro = pipe.micro_batches;
  sg::threads::world(l.dp * l.tp * l.pp).run([&](sg::threads::communicator& comm) {
    sg::testing::cpu_checking_saved_statistics backend;
    sg::testing::saved_statistics_checks checks;
    const auto trained = [&](auto compute) {
      auto rank = sg::bind(p, config.sizes(batch / micro, seq), comm, compute,
                           sg::mesh_shape{{"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}}, sg::random_weights(3, 0.3),
                           pipe);
      sg::trainer t(rank, o);
      for (int s = 0; s < 2; ++s) {
        std::vector<sg::tensor_map> parts;
        for (int k = 0; k < micro; ++k) parts.push_back(tokens(batch / micro, k * (batch / micro), s));
        t.step(parts);
      }
      return rank.parameters();
    };
    backend.checks = &checks;
    const auto params = checking ? trained(backend) : trained(sg::cpu::backend{});
    std::lock_guard lock(m);
    add_slices(params, result.trained);
    if (comm.rank() == 0) result.checks = checks;
  });
  return result;
}

sg::program program_of(bool sharded, sg::training t) {
  const sg::graph g = sharded ? sg::models::gpt2<Mesh3>({.type = sg::dtype::f64})
                              : sg::models::gpt2<Mesh3>({.type = sg::dtype::f64, .data_axis = "", .tensor_axis = ""});
  sg::program p = sg::compile_graph(g, t);
  REQUIRE(p.ok());
  return p;
}

void check_saved_and_equal(const sg::program& p, layout l, bool saves, const sg::pipeline_options& pipe = {},
                           const sg::training_options& o = options) {
  const run checked = train(p, l, true, pipe, o);
  CHECK((checked.checks.read > 0) == saves);
  CHECK(checked.checks.written >= checked.checks.read / 3);  // an attention's three gradients read one
  CHECK(checked.checks.wrong == 0);
  CHECK(checked.trained == train(p, l, false, pipe, o).trained);
}

}  // namespace

TEST_CASE("saved statistics: each attention backward reads what its forward saved",
          "[runtime][training][threads]") {
  // Per layer: the attention's result stays in its merge's per-layer buffer for the backward, and
  // the statistics with it. Recomputed, nothing is kept for the backward, which runs its forward
  // again: no statistics are saved.
  const sg::program plain = program_of(true, {});
  const sg::program full = program_of(true, {.recompute = sg::recompute::full});
  const sg::program attention = program_of(true, {.zero_stage = 2, .zero_axis = "dp", .recompute = sg::recompute::attention});
  const sg::program zero3 = program_of(true, {.zero_stage = 3});
  for (auto [p, l] : {std::pair{&plain, layout{1, 1}}, {&plain, layout{2, 2}}, {&full, layout{2, 1}},
                      {&attention, layout{2, 1}}, {&zero3, layout{2, 1}}}) {
    CAPTURE(p == &plain, p == &full, p == &attention, l.dp, l.tp);
    check_saved_and_equal(*p, l, p != &full && p != &attention);
  }
}

TEST_CASE("saved statistics: a pipeline's micro-batches each read their own, and the loss's too",
          "[runtime][training][threads]") {
  // The stages' values are banked per micro-batch in flight, the statistics with them; the loss's
  // gradient reads the rows' log-sum-exp its loss saved (a pipeline runs them apart).
  using sg::pipeline::schedule_kind;
  const sg::program p = program_of(false, {});
  for (schedule_kind kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b}) {
    CAPTURE(static_cast<int>(kind));
    check_saved_and_equal(p, {.pp = 2}, true, {.schedule = kind, .micro_batches = 4});
  }
}
