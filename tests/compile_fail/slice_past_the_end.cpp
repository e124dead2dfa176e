// A slice of sizes fixed at compile time that ends past its input.
// expect: shardgraph: slice .?'slice.?': the slice \[2, 5\) along dimension 1 ends past x.?'s 4: x \(batch, 4, model\), result \(batch, 3, model\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, fixed<4>, model}, sg::dtype::f32);
  sg::output(sg::slice(x, 1, 2, fixed<3>), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
