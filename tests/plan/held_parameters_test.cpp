// plan::plan_held_parameters: the parameter slices a rank holds, in load order, and their bytes, on
// the programs of test_programs.hpp (width 16, vocabulary 32, 8 layers, f32), on one stage and
// split over two (4 layers each).
#include <shardgraph/plan/held_parameters.hpp>

#include <vector>

#include "catch.hpp"
#include "test_programs.hpp"

namespace {

namespace sg = shardgraph;
using namespace plan_test_programs;

constexpr std::int64_t layers = 8;

struct rank_parameters {
  std::vector<std::pair<int, std::int64_t>> slices;  // (node, layer)
  std::uint64_t bytes = 0;
};
rank_parameters held_on(const sg::program& p, int stages, int rank) {
  sg::model_sizes sizes;
  sizes.set(sg::size_symbol::batch, 2).set(sg::size_symbol::seq, 4).set(sg::size_symbol::model, 16);
  sizes.set(sg::size_symbol::vocab, 32).set(sg::size_symbol::layers, layers);
  const sg::mesh_shape mesh{{"dp", 1}, {"pp", stages}};
  const sg::local_layout layout(p, sizes, mesh, mesh.coordinates(p.nodes.axes, rank));
  const sg::plan::step_index idx = sg::plan::index_steps(p, layers);
  const sg::plan::pipeline_stages st = sg::plan::plan_pipeline_stages(p, idx, {}, stages, rank);
  const sg::plan::held_parameters held = sg::plan::plan_held_parameters(p.nodes, layout, layers, st);
  rank_parameters r;
  for (const sg::plan::held_parameter& h : held.slices) r.slices.emplace_back(h.node, h.layer);
  r.bytes = held.bytes;
  return r;
}

}  // namespace

TEST_CASE("plan_held_parameters: one stage holds every weight, a block weight once per layer", "[plan]") {
  const sg::graph& g = untied.nodes;
  const int w_in = node_named(g, "w_in", sg::op::parameter),
            w_out = node_named(g, "w_out", sg::op::parameter);
  const int w = node_named(g, "h.w", sg::op::parameter);
  REQUIRE(w_in < w_out);  // node order: the weights before the block, then the block's
  REQUIRE(w_out < w);
  const rank_parameters r = held_on(untied, 1, 0);
  std::vector<std::pair<int, std::int64_t>> expected{{w_in, -1}, {w_out, -1}};
  for (std::int64_t l = 0; l < layers; ++l) expected.emplace_back(w, l);
  CHECK(r.slices == expected);
  // w_in 16 x 16, w_out 16 x 32, h.w 16 x 16 in each of 8 layers; 4 bytes each.
  CHECK(r.bytes == 4u * (16 * 16 + 16 * 32 + 8 * 16 * 16));
}

TEST_CASE("plan_held_parameters: a pipeline stage holds its own layers and the weights its phases read",
          "[plan]") {
  const sg::graph& g = untied.nodes;
  const int w_in = node_named(g, "w_in", sg::op::parameter),
            w_out = node_named(g, "w_out", sg::op::parameter);
  const int w = node_named(g, "h.w", sg::op::parameter);
  // Stage 0: the input product and layers 0-3; stage 1: layers 4-7 and the head.
  const rank_parameters first = held_on(untied, 2, 0), last = held_on(untied, 2, 1);
  CHECK(first.slices ==
        std::vector<std::pair<int, std::int64_t>>{{w_in, -1}, {w, 0}, {w, 1}, {w, 2}, {w, 3}});
  CHECK(last.slices ==
        std::vector<std::pair<int, std::int64_t>>{{w_out, -1}, {w, 4}, {w, 5}, {w, 6}, {w, 7}});
  CHECK(first.bytes == 4u * (16 * 16 + 4 * 16 * 16));
  CHECK(last.bytes == 4u * (16 * 32 + 4 * 16 * 16));
}

TEST_CASE("plan_held_parameters: a weight tied across the block is held by the first and the last stage",
          "[plan]") {
  const sg::graph& g = tied.nodes;
  const int w_in = node_named(g, "w_in", sg::op::parameter),
            w_out = node_named(g, "w_out", sg::op::parameter);
  const rank_parameters first = held_on(tied, 2, 0), last = held_on(tied, 2, 1);
  CHECK(first.slices.front() == std::pair<int, std::int64_t>{w_in, -1});
  CHECK(last.slices[0] == std::pair<int, std::int64_t>{w_in, -1});
  CHECK(last.slices[1] == std::pair<int, std::int64_t>{w_out, -1});
  CHECK(last.slices.size() == 2 + 4);
}
