// More nodes than the graph holds: the message names the capacity and how to raise it.
// expect: shardgraph: graph: more than 320 nodes \(at .?'gelu.?'\)\. raise the graph.?'s capacity, the builder.?'s second template argument \(builder<Mesh, 640>\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto h = g.input("x", {batch, model}, sg::dtype::f32);
  for (std::size_t i = 0; i < sg::default_graph_capacity; ++i) h = sg::gelu(h);
  sg::output(h, "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
