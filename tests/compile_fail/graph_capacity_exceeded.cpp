// More nodes than the graph holds: the message names the capacity and how to raise it.
// expect: shardgraph: graph: more than [0-9]+ nodes \(at .?'gelu.?'\)\. define SHARDGRAPH_MAX_NODES to a larger capacity
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto h = g.input("x", {batch, model}, sg::dtype::f32);
  for (std::size_t i = 0; i < sg::max_nodes; ++i) h = sg::gelu(h);
  sg::output(h, "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
