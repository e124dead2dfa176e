// A shape error followed by more ops: the first error is the one message, not an out-of-range read.
// expect: shardgraph: add .?'add.?': operands have different shapes: a \(batch, seq, model\), b \(batch, seq, ffn\)
// reject: subscript
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto h = g.input("h", {batch, seq, ffn}, sg::dtype::f32);
  auto y = sg::layer_norm(x + h, g.param("ln_f.weight", {model}), g.param("ln_f.bias", {model}));
  sg::output(sg::linear(y, g.param("lm_head.weight", {model, vocab})), "logits");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
