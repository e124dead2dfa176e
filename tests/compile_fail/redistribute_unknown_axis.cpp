// redistribute names an axis the mesh does not have.
// expect: shardgraph: redistribute .?'redistribute.?': axis .?'sp.?' is not in the mesh
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  sg::output(sg::redistribute(x, sg::on<"sp">(sg::shard<1>)), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
