// A parameter annotated Partial: no op signature accepts a weight that is a sum of addends.
// expect: shardgraph: parameter .?'ln_f.weight.?': a parameter cannot be Partial on .?'tp.?'
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, model}, sg::dtype::f32);
  auto w = g.param("ln_f.weight", {model}, sg::on<"tp">(sg::partial));
  auto b = g.param("ln_f.bias", {model});
  sg::output(sg::layer_norm(x, w, b), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
