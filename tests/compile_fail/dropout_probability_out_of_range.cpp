// A dropout probability of 1 drops every element: the graph does not compile.
// expect: shardgraph: dropout .?'dropout.?': the probability p of dropping an element is 1 or more, which drops every element. give p with 0 <= p < 1
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  sg::output(sg::dropout(x, 1.0, 7), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
