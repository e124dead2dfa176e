// A norm's weight sized for the MLP's hidden dimension instead of the model's.
// expect: shardgraph: layer_norm .?'ln_1.?': weight and bias must be \(features,\) with the input.?'s last dimension: input \(batch, seq, model\), weight \(ffn\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  sg::output(sg::layer_norm(x, g.param("ln_1.weight", {ffn}), g.param("ln_1.bias", {ffn})), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
