// plan::plan_micro_batch_banks: which values a pipeline stage keeps once per micro-batch in flight,
// on the programs of test_programs.hpp split over two stages (1F1B, 4 micro-batches).
#include <shardgraph/plan/micro_batch_banks.hpp>

#include <vector>

#include "catch.hpp"
#include "test_programs.hpp"

namespace {

namespace sg = shardgraph;
using namespace plan_test_programs;

constexpr std::int64_t layers = 4;

struct stage_banks {
  sg::plan::step_index idx;
  sg::plan::pipeline_stages stages;
  sg::plan::micro_batch_banks banks;
};
stage_banks banks_of(const sg::program& p, int rank, const std::vector<std::size_t>& recomputed = {}) {
  stage_banks b;
  b.idx = sg::plan::index_steps(p, layers);
  b.stages = sg::plan::plan_pipeline_stages(p, b.idx, {.micro_batches = 4}, 2, rank);
  b.banks = sg::plan::plan_micro_batch_banks(p, b.idx, b.stages, recomputed);
  return b;
}

}  // namespace

TEST_CASE("plan_micro_batch_banks: a forward's values that its backward reads, and the boundaries",
          "[plan]") {
  const sg::graph& g = untied.nodes;
  const int x = node_named(g, "x", sg::op::input), targets = node_named(g, "targets", sg::op::input);
  const int w_in = node_named(g, "w_in", sg::op::parameter), w = node_named(g, "h.w", sg::op::parameter);
  const int block_product = reader_of(g, w, sg::op::linear);  // linear(t, w): gelu's backward reads it
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    const stage_banks b = banks_of(untied, rank);
    // The four values that cross stages: the blocks' inputs and results.
    for (int i : {b.idx.forward_begin_node, b.idx.forward_end_node, b.idx.backward_begin_node,
                  b.idx.backward_end_node})
      CHECK(b.banks.banked(i));
    CHECK(b.banks.banked(block_product));
    // Weights and their gradients live once (the gradients sum over micro-batches).
    CHECK(!b.banks.banked(w));
    CHECK(!b.banks.banked(w_in));
    CHECK(!b.banks.banked(gradient_of(g, w)));
    // The targets are read by the loss and its gradient, both in the last stage's forward action.
    CHECK(!b.banks.banked(targets));
  }
  // x is read by w_in's gradient in the tail: the first stage's backward action. The last stage
  // runs no tail (nothing tied).
  CHECK(banks_of(untied, 0).banks.banked(x));
  CHECK(!banks_of(untied, 1).banks.banked(x));
}

TEST_CASE("plan_micro_batch_banks: a recomputed step's value is made in the backward, not kept", "[plan]") {
  const sg::graph& g = untied.nodes;
  const int block_product = reader_of(g, node_named(g, "h.w", sg::op::parameter), sg::op::linear);
  const sg::plan::step_index idx = sg::plan::index_steps(untied, layers);
  const std::size_t step = idx.producer_step[static_cast<std::size_t>(block_product)];
  REQUIRE(idx.phase_of(step) == sg::plan::phase::forward_block);
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    CHECK(banks_of(untied, rank).banks.banked(block_product));
    CHECK(!banks_of(untied, rank, {step}).banks.banked(block_product));
    // What the recomputed step reads is read in the backward action: the block's input stays banked.
    CHECK(banks_of(untied, rank, {step}).banks.banked(idx.forward_begin_node));
  }
}

TEST_CASE("plan_micro_batch_banks: the tied last stage runs its tail in the forward action", "[plan]") {
  const sg::graph& g = tied.nodes;
  const int x = node_named(g, "x", sg::op::input);
  const stage_banks first = banks_of(tied, 0), last = banks_of(tied, 1);
  REQUIRE(last.stages.computed_here(gradient_of(g, node_named(g, "w_in", sg::op::parameter))));
  // The tail reads x on both stages, but only the first stage's tail is a backward action.
  CHECK(first.banks.banked(x));
  CHECK(!last.banks.banked(x));
}
