// A residual add of two tensors of different shapes.
// expect: shardgraph: add .?'add.?': operands have different shapes: a \(batch, seq, model\), b \(batch, seq, ffn\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto h = g.input("h", {batch, seq, ffn}, sg::dtype::f32);
  sg::output(x + h, "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
