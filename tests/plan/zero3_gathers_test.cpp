// plan::plan_zero3_gathers on the two-layer MLP of plan_test_models.hpp at dp = 2, tp = 2: chunks of
// ceil(n / 2) elements per parameter, where rank r's chunk lies in the slice, which weights each
// block gathers per layer and which are gathered for the whole of forward().
#include <shardgraph/plan/zero3_gathers.hpp>

#include "plan_test_models.hpp"

namespace sg = shardgraph;
using namespace plan_test_models;

namespace {

constexpr sg::program zero3 = sg::compile<mlp_blocks, sg::training{.zero_stage = 3}>();
constexpr sg::program zero2 = sg::compile<mlp_blocks, sg::training{.zero_stage = 2}>();

sg::plan::zero3_gathers plan_of(const sg::program& p, int coordinate, bool holds_unlayered = true) {
  const std::vector<std::int64_t> elements = local_elements(p, 2, 2, {coordinate, 0});
  const std::vector<int> axis_sizes{2, 2};
  return sg::plan::plan_zero3_gathers(
      {.compiled = p,
       .elements = elements,
       .axis_sizes = axis_sizes,
       .zero_coordinate = coordinate,
       .holds = [&](int i, std::int64_t) { return holds_unlayered || p.nodes[i].region >= 0; }});
}

std::size_t at(int i) { return static_cast<std::size_t>(i); }

}  // namespace

TEST_CASE("plan_zero3_gathers: each rank stores a chunk of ceil(n / dp) of every parameter", "[plan]") {
  const sg::graph& g = zero3.nodes;
  const sg::plan::zero3_gathers z = plan_of(zero3, 1);
  REQUIRE(z.on());
  CHECK(z.axis == dp_axis);
  CHECK(z.parts == 2);
  CHECK(z.coordinate == 1);
  const int head = parameter_named(g, "w_head"), w_in = parameter_named(g, "h.w_in");
  const int w_out = parameter_named(g, "h.w_out");
  // 35 elements of w_head (5 x 7) and 15 of each block weight (5 x 6 / tp).
  CHECK(z.chunk[at(head)] == 18);
  CHECK(z.chunk[at(w_in)] == 8);
  CHECK(z.chunk[at(w_out)] == 8);
  CHECK(z.gathered(head) == 36);  // the all-gather's output: two chunks, the slice and a padding element
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind != sg::op::parameter) CHECK(z.chunk[at(i)] == 0);
  // Rank 1 stores elements [18, 35) of the head: 17, padded to 18; rank 0 stores [0, 18).
  CHECK(z.chunk_first(head, 35) == 18);
  CHECK(z.chunk_count(head, 35) == 17);
  const sg::plan::zero3_gathers rank0 = plan_of(zero3, 0);
  CHECK(rank0.chunk_first(head, 35) == 0);
  CHECK(rank0.chunk_count(head, 35) == 18);
}

TEST_CASE("plan_zero3_gathers: a block gathers its weights per layer, the head once per forward()",
          "[plan]") {
  const sg::graph& g = zero3.nodes;
  const sg::plan::zero3_gathers z = plan_of(zero3, 0);
  const std::vector<int> block_weights{parameter_named(g, "h.w_in"), parameter_named(g, "h.w_out")};
  // The forward block and the backward block gather the same weights (the forward block's).
  CHECK(z.layer_weights[at(repeat_begin(g, false))] == block_weights);
  CHECK(z.layer_weights[at(repeat_begin(g, true))] == block_weights);
  CHECK(z.unlayered == std::vector<int>{parameter_named(g, "w_head")});
  // Two buffers per block weight: layer l gathers into buffer l % 2, the next layer into the other.
  CHECK(sg::plan::zero3_gathers::buffer_of(0) == 0);
  CHECK(sg::plan::zero3_gathers::buffer_of(3) == 1);
  // A pipeline stage that does not hold the head does not gather it.
  CHECK(plan_of(zero3, 0, false).unlayered.empty());
}

TEST_CASE("plan_zero3_gathers: below ZeRO-3 parameters stay whole", "[plan]") {
  const sg::plan::zero3_gathers z = plan_of(zero2, 0);
  CHECK_FALSE(z.on());
  REQUIRE(z.chunk.size() == static_cast<std::size_t>(zero2.nodes.size()));
  CHECK(std::count(z.chunk.begin(), z.chunk.end(), 0) == static_cast<long>(z.chunk.size()));
  CHECK(z.unlayered.empty());
}
