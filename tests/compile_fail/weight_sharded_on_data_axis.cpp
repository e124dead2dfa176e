// A weight is sharded on the axis that already shards the batch.
// expect: shardgraph: linear .?'attn.q.?': on axis .?'dp.?': the weight is sharded on a mesh axis that also shards the activations
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  auto w = g.param("attn.q.weight", {model, model}, sg::on<"dp">(sg::shard<1>));
  sg::output(sg::linear(x, w), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
