// An annotation names an axis the mesh does not have.
// expect: shardgraph: parameter .?'mlp.c_fc.weight.?': axis .?'tq.?' is not in the mesh \(dp, tp\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, model}, sg::dtype::f32);
  auto w = g.param("mlp.c_fc.weight", {model, ffn}, sg::on<"tq">(sg::shard<1>));
  sg::output(sg::linear(x, w), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
