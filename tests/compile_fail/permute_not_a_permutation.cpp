// A permute that names one dimension twice: the result would lose x's other dimension.
// expect: shardgraph: permute .?'permute.?': the dimensions \{0, 0, 1\} are not a permutation of the 3 dimensions of x: x \(batch, seq, model\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  sg::output(sg::permute(x, {0, 0, 1}), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
