// A bias of the input's size added after a projection to the hidden size.
// expect: shardgraph: add_bias .?'add_bias.?': the bias must be one-dimensional and match the input.?'s last dimension: input \(batch, seq, ffn\), bias \(model\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  sg::output(sg::linear(x, g.param("c_fc.weight", {model, ffn}), g.param("c_fc.bias", {model})), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
