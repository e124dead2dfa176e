// plan::index_steps: producers, readers and the five phases of a training program's steps, on the
// residual MLP blocks of test_programs.hpp (embedding-free: its `pre` phase is the input's product).
#include <shardgraph/plan/step_index.hpp>

#include "catch.hpp"
#include "test_programs.hpp"

namespace {

namespace sg = shardgraph;
using plan_test_programs::node_named;
const sg::program& training_program = plan_test_programs::untied;
const sg::program& inference_program = plan_test_programs::untied_inference;

}  // namespace

TEST_CASE("index_steps: every computed node has its step, every input its readers", "[plan]") {
  const sg::program& p = training_program;
  REQUIRE(p.ok());
  const sg::plan::step_index idx = sg::plan::index_steps(p, 2);
  const sg::graph& g = p.nodes;
  CHECK(idx.layers == 2);
  CHECK(idx.forward_blocks == 1);
  for (int i = 0; i < g.size(); ++i) {
    CAPTURE(i, sg::op_name(g[i].kind));
    const bool source = g[i].kind == sg::op::input || g[i].kind == sg::op::parameter;
    CHECK((idx.producer_step[static_cast<std::size_t>(i)] == sg::plan::step_index::no_step) == source);
    for (int k = 0; k < g[i].input_count; ++k) {
      const std::vector<int>& r = idx.readers[static_cast<std::size_t>(g[i].inputs[k])];
      CHECK(std::count(r.begin(), r.end(), i) == 1);
    }
  }
  const int w = node_named(g, "h.w", sg::op::parameter);
  CHECK(idx.readers[static_cast<std::size_t>(w)].size() >= 2);  // the forward product and a gradient's
}

TEST_CASE("index_steps: a training program's steps run pre, block, post, backward block, tail", "[plan]") {
  const sg::program& p = training_program;
  const sg::plan::step_index idx = sg::plan::index_steps(p, 3);
  REQUIRE(idx.forward_begin_step >= 0);
  REQUIRE(idx.backward_begin_step > idx.forward_end_step);
  CHECK(p.nodes[idx.forward_begin_node].kind == sg::op::repeat_begin);
  CHECK(!p.nodes[idx.forward_begin_node].reverse);
  CHECK(p.nodes[idx.backward_begin_node].reverse);
  CHECK(p.nodes[idx.forward_end_node].kind == sg::op::repeat_end);
  CHECK(sg::plan::loop_begin_step(p, idx.forward_begin_node) == static_cast<std::size_t>(idx.forward_begin_step));
  CHECK(sg::plan::loop_end_step(p, idx.backward_begin_node) == static_cast<std::size_t>(idx.backward_end_step));
  // The phases are contiguous and in order; the loss is computed after the forward block, the input
  // product's weight gradient in the tail.
  sg::plan::phase last = sg::plan::phase::pre;
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    CHECK(static_cast<int>(idx.phase_of(s)) >= static_cast<int>(last));
    last = idx.phase_of(s);
  }
  CHECK(last == sg::plan::phase::tail);
  const int loss = node_named(p.nodes, "loss", sg::op::output);
  CHECK(idx.phase_of(idx.producer_step[static_cast<std::size_t>(loss)]) == sg::plan::phase::post);
  CHECK(idx.phase_of(static_cast<std::size_t>(idx.forward_begin_step) - 1) == sg::plan::phase::pre);
}

TEST_CASE("index_steps: an inference program has no backward block", "[plan]") {
  const sg::plan::step_index idx = sg::plan::index_steps(inference_program, 2);
  CHECK(idx.forward_begin_step >= 0);
  CHECK(idx.backward_begin_step < 0);
  CHECK(idx.backward_begin_node < 0);
  CHECK(idx.phase_of(inference_program.steps.size() - 1) == sg::plan::phase::post);
}
