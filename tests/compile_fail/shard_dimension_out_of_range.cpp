// Shard<3> of a two-dimensional weight.
// expect: shardgraph: parameter .?'mlp.c_fc.weight.?': shard<3> on axis .?'tp.?' but the tensor has 2 dimensions
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, model}, sg::dtype::f32);
  auto w = g.param("mlp.c_fc.weight", {model, ffn}, sg::on<"tp">(sg::shard<3>));
  sg::output(sg::linear(x, w), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
