// The rope node carries its rope_scaling through compilation, and autodiff gives the rope's
// gradient the same one (the transpose of the same rotation and factor).
#include <shardgraph/models/llama.hpp>
#include <shardgraph/passes/compile.hpp>

#include "catch.hpp"

namespace sg = shardgraph;

TEST_CASE("rope and rope_grad carry the model's rope_scaling after compilation", "[passes]") {
  const sg::rope_scaling yarn{.type = sg::rope_type::yarn, .theta = 500000, .factor = 4, .original_max_positions = 64,
                              .attention_factor = 1.2};
  const sg::program p =
      sg::compile_graph(sg::models::llama<sg::mesh<"dp", "tp">>({.rope = yarn}), sg::training{});
  REQUIRE(p.ok());
  int ropes = 0, gradients = 0;
  for (int i = 0; i < p.nodes.size(); ++i) {
    const sg::node& n = p.nodes[i];
    if (n.kind != sg::op::rope && n.kind != sg::op::rope_grad) continue;
    CAPTURE(n.name.view());
    CHECK(n.rope == yarn);
    ++(n.kind == sg::op::rope ? ropes : gradients);
  }
  CHECK(ropes == 2);  // q and k of the repeated layer
  CHECK(gradients == 2);
}
