// Dropout in a tiny model on thread ranks: its mask is a function of the element's index in the
// whole tensor, so dp=2 x tp=2 (a block sharded on two dimensions, and a Partial value) gives the
// loss and every gradient of one rank (f64, relative 1e-9); the next step draws another mask; the
// trainer's steps use it and forward() outside a step passes x through.
#include <chrono>
#include <cmath>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/runtime/trainer.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "support/tiny_model.hpp"
#include "support/whole_gradients.hpp"

namespace sg = shardgraph;

namespace {

using test_support::gradient_map;

constexpr std::int64_t n_batch = 2, n_seq = 3, n_model = 4, n_ffn = 6, n_vocab = 5;
sg::model_sizes sizes() { return test_support::tiny_sizes(n_batch, n_seq, n_model, n_ffn, n_vocab); }

// In the frame of support/tiny_model.hpp: column-parallel linear: (batch, seq, ffn) Shard<0> on dp,
// Shard<2> on tp -> dropout -> relu -> row-parallel linear: Partial on tp -> dropout (of each addend,
// with the same mask).
constexpr sg::tensor dropout_body(sg::tensor x, sg::tensor w_in, sg::tensor w_out) {
  auto h = sg::relu(sg::dropout(sg::linear(x, w_in), 0.5, 17));
  return sg::rename(sg::dropout(sg::linear(h, w_out), 0.3, 29), "y");
}
constexpr sg::program dropped = sg::compile<test_support::tiny_model<dropout_body>, sg::training{}>();
static_assert(dropped.count(sg::op::dropout) == 4);  // two forward, two gradients (dropout of dy)
static_assert(dropped.count(sg::op::all_reduce, "tp") >= 1);
static_assert(dropped.nodes[dropped.nodes.find("y")].spec[1] ==
              sg::partial);  // tp: dropout of a Partial value

const sg::mesh_shape one_rank{{"dp", 1}, {"tp", 1}}, four_ranks{{"dp", 2}, {"tp", 2}};

gradient_map gradients(const sg::mesh_shape& mesh, sg::compute::dropout_run run, double* loss) {
  return test_support::whole_gradients(dropped, sizes(), mesh, sg::random_weights(5, 0.8),
                                       test_support::sine_inputs(n_batch, n_seq, n_model, n_vocab), loss,
                                       run);
}

}  // namespace

TEST_CASE("dropout: dp=2 x tp=2 draws one rank's masks: loss and gradients equal", "[runtime][threads]") {
  for (std::uint64_t step : {0u, 3u}) {
    CAPTURE(step);
    double reference_loss = 0, loss = 0;
    const gradient_map reference = gradients(one_rank, {.active = true, .step = step}, &reference_loss);
    REQUIRE(reference.size() == 3);
    const gradient_map got = gradients(four_ranks, {.active = true, .step = step}, &loss);
    CHECK(std::isfinite(reference_loss));
    CHECK(std::abs(loss - reference_loss) <= 1e-12 * std::abs(reference_loss));
    test_support::check_same_gradients(got, reference, 1e-9);
  }
}

TEST_CASE("dropout: the next step draws another mask; an inactive run passes x through",
          "[runtime][threads]") {
  double first = 0, next = 0, inactive = 0;
  const gradient_map at_first = gradients(one_rank, {.active = true, .step = 0}, &first);
  const gradient_map at_next = gradients(one_rank, {.active = true, .step = 1}, &next);
  const gradient_map passed = gradients(one_rank, {}, &inactive);
  CHECK(first != next);
  CHECK(at_first.at("w_in") != at_next.at("w_in"));
  CHECK(inactive != first);
  CHECK(passed.at("w_in") != at_first.at("w_in"));
}

TEST_CASE("dropout: the trainer's steps drop on every layout alike; forward() outside them does not",
          "[runtime][training][threads]") {
  struct run {
    double before = 0;                  // forward() before any step
    std::vector<double> steps;          // the two steps' losses
    double after = 0, after_again = 0;  // forward() after them, twice
  };
  auto train = [](const sg::mesh_shape& mesh) {
    run r;
    std::mutex m;
    sg::threads::world(mesh.world_size(dropped.nodes.axes), std::chrono::seconds(60))
        .run([&](sg::threads::communicator& comm) {
          auto rank = sg::bind(dropped, sizes(), comm, sg::cpu::backend{}, mesh, sg::random_weights(5, 0.8));
          sg::trainer t(rank, {.adamw = {.lr = 1e-2}, .schedule = std::nullopt, .max_grad_norm = 1.0});
          const auto batch = test_support::sine_inputs(n_batch, n_seq, n_model, n_vocab);
          run mine;
          mine.before = rank.forward(batch, "loss").at("loss").at(0);
          for (int s = 0; s < 2; ++s) mine.steps.push_back(t.step(batch).loss);
          mine.after = rank.forward(batch, "loss").at("loss").at(0);
          mine.after_again = rank.forward(batch, "loss").at("loss").at(0);
          std::lock_guard lock(m);
          if (comm.rank() == 0) r = mine;
        });
    return r;
  };
  const run reference = train(one_rank), got = train(four_ranks);
  REQUIRE(got.steps.size() == 2);
  for (std::size_t s = 0; s < 2; ++s)
    CHECK(std::abs(got.steps[s] - reference.steps[s]) <= 1e-12 * reference.steps[s]);
  CHECK(std::abs(got.after - reference.after) <= 1e-12 * reference.after);
  // The first step's loss is forward()'s on the same weights, but with the masks drawn.
  CHECK(std::abs(reference.steps[0] - reference.before) > 1e-6);
  CHECK(reference.after == reference.after_again);
}
