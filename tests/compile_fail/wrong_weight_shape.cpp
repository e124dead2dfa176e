// A weight declared (out, in) used as (in, out): the shapes do not chain.
// expect: shardgraph: linear .?'c_fc.?': the input.?'s last dimension differs from the weight.?'s input dimension
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, model}, sg::dtype::f32);
  auto w = g.param("c_fc.weight", {ffn, model});
  sg::output(sg::linear(x, w), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
