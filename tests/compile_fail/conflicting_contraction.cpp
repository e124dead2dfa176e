// The input is sharded along the contraction dimension on tp, the weight along its output dimension.
// expect: shardgraph: linear .?'mlp.c_proj.?': on axis .?'tp.?': conflicting shardings of the contraction dimension
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto h = g.input("h", {batch, seq, ffn}, sg::dtype::f32, sg::on<"tp">(sg::shard<2>));
  auto w = g.param("mlp.c_proj.weight", {ffn, model}, sg::on<"tp">(sg::shard<1>));
  sg::output(sg::linear(h, w), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
