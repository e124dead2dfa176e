// plan::plan_pipeline_stages: each rank's chunks, held layers and weights, phases, and the slots
// and receive buffers its schedule needs, on the 8-layer programs of test_programs.hpp.
// Partitions: 8 layers on 2 stages: 4, 4 (each stage's cost, with the embedding or the head, 5);
// on 4 or 8 (virtual) stages: 2 each or 1 each.
#include <shardgraph/plan/pipeline_stages.hpp>

#include "catch.hpp"
#include "test_programs.hpp"

namespace {

namespace sg = shardgraph;
using namespace plan_test_programs;
using sg::pipeline::schedule_kind;
using chunk_list = std::vector<std::pair<std::int64_t, std::int64_t>>;

constexpr std::int64_t layers = 8;

sg::plan::pipeline_stages stages_of(const sg::program& p, const sg::pipeline_options& pipe, int ranks,
                                    int rank) {
  return sg::plan::plan_pipeline_stages(p, sg::plan::index_steps(p, layers), pipe, ranks, rank);
}

// The nodes whose placement the tests check: one per phase.
struct probe {
  int pre_product, block_product, logits, loss, tail_gradient, w_in, w_out, w;
};
probe probe_of(const sg::program& p) {
  const sg::graph& g = p.nodes;
  const sg::plan::step_index idx = sg::plan::index_steps(p, layers);
  probe n{};
  n.w_in = node_named(g, "w_in", sg::op::parameter);
  n.w_out = node_named(g, "w_out", sg::op::parameter);
  n.w = node_named(g, "h.w", sg::op::parameter);
  n.pre_product = g[idx.forward_begin_node].inputs[0];  // linear(x, w_in): the block's input
  n.block_product = reader_of(g, n.w, sg::op::linear);
  n.logits = reader_of(g, n.w_out, sg::op::linear);
  n.loss = node_named(g, "loss", sg::op::output);
  n.tail_gradient = gradient_of(g, n.w_in);
  return n;
}

std::vector<bool> held_layers(const sg::plan::pipeline_stages& st) {
  std::vector<bool> held;
  for (std::int64_t l = 0; l < layers; ++l) held.push_back(st.holds_layer(l));
  return held;
}

}  // namespace

TEST_CASE("plan_pipeline_stages: without a pipeline axis nothing is split", "[plan]") {
  const sg::plan::pipeline_stages st = stages_of(untied, {}, 1, 0);
  const probe n = probe_of(untied);
  CHECK(!st.pipelined());
  CHECK(st.chunks.empty());
  CHECK(st.banks == 1);
  CHECK(st.inbox == 0);
  CHECK(!st.tied);
  for (int i : {n.pre_product, n.block_product, n.logits, n.loss, n.tail_gradient}) {
    CHECK(st.computed_here(i));
    CHECK(st.needed_here(i));
  }
  CHECK(st.holds(n.w_in, 0));
  CHECK(st.holds(n.w_out, 0));
  CHECK(st.holds(n.w, layers - 1));
}

TEST_CASE("plan_pipeline_stages: two stages, 1F1B and GPipe", "[plan]") {
  const probe n = probe_of(untied);
  const auto one_f_one_b = [](int r) { return stages_of(untied, {.micro_batches = 4}, 2, r); };
  const sg::plan::pipeline_stages first = one_f_one_b(0), last = one_f_one_b(1);
  CHECK(first.pipelined());
  CHECK(first.coordinate == 0);
  CHECK(first.chunks == chunk_list{{0, 4}});
  CHECK(last.chunks == chunk_list{{4, 8}});
  CHECK(held_layers(first) == std::vector<bool>{true, true, true, true, false, false, false, false});
  CHECK(held_layers(last) == std::vector<bool>{false, false, false, false, true, true, true, true});
  CHECK((first.holds_first && !first.holds_last));
  CHECK((!last.holds_first && last.holds_last));
  CHECK((!first.tied && !last.tied));
  // 1F1B: stage r runs p - r - 1 forwards ahead, so p - r micro-batches are alive at once. The last
  // stage receives micro-batch m's activation at the tick its forward starts: one waits at a time.
  CHECK(first.banks == 2);
  CHECK(last.banks == 1);
  CHECK(first.inbox == 0);
  CHECK(last.inbox == 1);
  // GPipe: every micro-batch is alive until the backwards; forwards still follow their inputs.
  for (int r : {0, 1}) {
    const sg::plan::pipeline_stages g =
        stages_of(untied, {.schedule = schedule_kind::gpipe, .micro_batches = 4}, 2, r);
    CHECK(g.banks == 4);
    CHECK(g.inbox == r);
  }

  // pre (the input product) and tail (w_in's gradient) on the first stage, the head on the last,
  // the block everywhere.
  CHECK(first.computed_here(n.pre_product));
  CHECK(!last.computed_here(n.pre_product));
  CHECK(first.computed_here(n.block_product));
  CHECK(last.computed_here(n.block_product));
  CHECK(!first.computed_here(n.logits));
  CHECK(last.computed_here(n.logits));
  CHECK(first.computed_here(n.tail_gradient));
  CHECK(!last.computed_here(n.tail_gradient));
  // The block's input is read by the block's first step on every stage (received there); the
  // logits nowhere but the last; the loss, an output, on every rank (broadcast).
  CHECK(last.needed_here(n.pre_product));
  CHECK(!first.needed_here(n.logits));
  CHECK(first.needed_here(n.loss));
  // Weights: w_in read before the block, w_out after it; block weights by layer.
  CHECK(first.reads_pre[static_cast<std::size_t>(n.w_in)]);
  CHECK(!first.reads_post[static_cast<std::size_t>(n.w_in)]);
  CHECK(first.reads_post[static_cast<std::size_t>(n.w_out)]);
  CHECK((first.holds(n.w_in, 0) && !last.holds(n.w_in, 0)));
  CHECK((!first.holds(n.w_out, 0) && last.holds(n.w_out, 0)));
  CHECK((first.holds(n.w, 3) && !first.holds(n.w, 4)));
  CHECK((!last.holds(n.w, 3) && last.holds(n.w, 4)));
}

TEST_CASE("plan_pipeline_stages: four stages, 1F1B and GPipe", "[plan]") {
  const probe n = probe_of(untied);
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    const sg::plan::pipeline_stages st = stages_of(untied, {.micro_batches = 8}, 4, r);
    CHECK(st.chunks == chunk_list{{2 * r, 2 * r + 2}});
    CHECK(st.holds_first == (r == 0));
    CHECK(st.holds_last == (r == 3));
    CHECK(st.banks == 4 - r);             // 1F1B: p - r in flight
    CHECK(st.inbox == (r == 0 ? 0 : 1));  // each activation arrives as its forward starts
    CHECK(st.computed_here(n.pre_product) == (r == 0));
    CHECK(st.computed_here(n.block_product));
    CHECK(st.computed_here(n.loss) == (r == 3));
    CHECK(st.computed_here(n.tail_gradient) == (r == 0));
    CHECK(st.holds(n.w_in, 0) == (r == 0));
    CHECK(st.holds(n.w_out, 0) == (r == 3));
    CHECK(st.holds(n.w, 2 * r + 1));
    CHECK(!st.holds(n.w, (2 * r + 2) % layers));
    const sg::plan::pipeline_stages g =
        stages_of(untied, {.schedule = schedule_kind::gpipe, .micro_batches = 8}, 4, r);
    CHECK(g.banks == 8);
    CHECK(g.inbox == (r == 0 ? 0 : 1));
  }
}

TEST_CASE("plan_pipeline_stages: a weight read before and after the block is tied", "[plan]") {
  const probe n = probe_of(tied);
  for (int ranks : {2, 4}) {
    for (int r = 0; r < ranks; ++r) {
      CAPTURE(ranks, r);
      const sg::plan::pipeline_stages st = stages_of(tied, {.micro_batches = ranks}, ranks, r);
      const bool first = r == 0, last = r == ranks - 1;
      CHECK(st.tied);
      CHECK(st.reads_pre[static_cast<std::size_t>(n.w_in)]);
      CHECK(st.reads_post[static_cast<std::size_t>(n.w_in)]);
      CHECK(!st.reads_pre[static_cast<std::size_t>(n.w_out)]);
      // The first and the last stage both hold w_in; the last runs the tail from a zero gradient
      // to add the head's part of w_in's gradient.
      CHECK(st.holds(n.w_in, 0) == (first || last));
      CHECK(st.holds(n.w_out, 0) == last);
      CHECK(st.computed_here(n.tail_gradient) == (first || last));
      CHECK(st.computed_here(n.pre_product) == first);
    }
  }
}

TEST_CASE("plan_pipeline_stages: interleaved 1F1B, two chunks per rank", "[plan]") {
  const sg::pipeline_options pipe{
      .schedule = schedule_kind::interleaved_1f1b, .micro_batches = 4, .virtual_stages = 2};
  // Two ranks: virtual stages 0..3 of 2 layers each; rank r holds stages r and r + 2.
  const sg::plan::pipeline_stages r0 = stages_of(untied, pipe, 2, 0), r1 = stages_of(untied, pipe, 2, 1);
  CHECK(r0.chunks == chunk_list{{0, 2}, {4, 6}});
  CHECK(r1.chunks == chunk_list{{2, 4}, {6, 8}});
  CHECK(held_layers(r0) == std::vector<bool>{true, true, false, false, true, true, false, false});
  CHECK((r0.holds_first && !r0.holds_last));
  CHECK((!r1.holds_first && r1.holds_last));
  // Rank 0 runs forwards (m, chunk) 00 10 01 11 20 before its first backward, then 30: all four
  // micro-batches alive. Rank 1 runs 00 10 01, backward 01, 11, backward 11, 20, then micro-batch
  // 0's last backward before 30: three alive.
  CHECK(r0.banks == 4);
  CHECK(r1.banks == 3);
  // Timed (forward 1 tick, backward 2): rank 0 receives each chunk-1 activation as its forward
  // starts or a tick before it (ticks 2, 3, 10, 13; forwards at 2, 3, 11, 14). Rank 1 receives
  // (1, chunk 1) at 4 and (2, chunk 0) at 5 while its forward of (1, chunk 1) waits until 6.
  CHECK(r0.inbox == 1);
  CHECK(r1.inbox == 2);
  // Four ranks, eight virtual stages of one layer: rank r holds layers r and r + 4. Every rank runs
  // at least 4 forwards (10, 8, 6, 4 warmup) before its first backward, micro-batches 0..3 of chunk
  // 0 first: all four alive. Each chunk-1 activation is consumed by the forward right after its
  // receive, but on rank 3, which receives (1, chunk 1) and (2, chunk 1) around its backward of (0, 1).
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    const sg::plan::pipeline_stages st = stages_of(
        untied, {.schedule = schedule_kind::interleaved_1f1b, .micro_batches = 4, .virtual_stages = 2}, 4, r);
    CHECK(st.chunks == chunk_list{{r, r + 1}, {r + 4, r + 5}});
    CHECK(st.holds_first == (r == 0));
    CHECK(st.holds_last == (r == 3));
    CHECK(st.banks == 4);
    CHECK(st.inbox == (r == 3 ? 2 : 1));
  }
}

TEST_CASE("plan_pipeline_stages: one repeat block only, and checked splits", "[plan]") {
  using sg::testing::error_of;
  CHECK(error_of([] { stages_of(two_repeats, {.micro_batches = 2}, 2, 0); }) ==
        "shardgraph: bind: pipeline: the program has 2 repeat blocks. pipeline stages split one repeat "
        "block's layers: build the model with one repeat");
  // On one stage the program runs whole: two blocks are fine.
  CHECK(error_of([] { stages_of(two_repeats, {}, 1, 0); }) == "(no error)");
  CHECK(sg::testing::contains(error_of([] {
                                stages_of(untied, {.micro_batches = 2, .stage_layers = {3, 3}}, 2, 0);
                              }),
                              "sum to 6"));
}
