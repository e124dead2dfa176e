// fuse: elementwise chains become one step.
#include "catch.hpp"
#include "test_models.hpp"

namespace sg = shardgraph;
using namespace test_models;

TEST_CASE("fuse merges bias + gelu and bias + residual add into single steps", "[passes]") {
  static constexpr sg::program p = sg::compile_graph(megatron_mlp_with_bias());
  STATIC_REQUIRE(p.ok());
  STATIC_REQUIRE(p.count(sg::step_kind::fused) == 2);
  constexpr const sg::node& gelu = named(p.nodes, "gelu", sg::op::gelu);
  STATIC_REQUIRE(gelu.group >= 0);
  STATIC_REQUIRE(p.nodes[gelu.group].kind == sg::op::add_bias);
}
