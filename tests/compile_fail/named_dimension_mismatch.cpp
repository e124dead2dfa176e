// Two spellings of a user's dimension are two dimensions: the weight's "hiden" does not chain
// with the input's "hidden".
// expect: shardgraph: linear .?'w_out.?': the input.?'s last dimension differs from the weight.?'s input dimension
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, named<"hidden">}, sg::dtype::f32);
  auto w = g.param("w_out", {named<"hiden">, model});
  sg::output(sg::linear(x, w), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
