// A sum over a dimension x does not have (x has three).
// expect: shardgraph: sum .?'sum.?': reduces a dimension x does not have: x \(batch, seq, model\). give an axis in \[-rank, rank\) of x
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  sg::output(sg::sum(x, 3), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
