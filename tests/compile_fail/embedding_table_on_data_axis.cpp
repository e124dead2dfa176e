// The embedding table sharded on the axis that shards the token ids.
// expect: shardgraph: embedding .?'wte.?': on axis .?'dp.?': the table is sharded on a mesh axis that also shards the token ids
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto ids = g.input("input_ids", {batch, seq}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto wte = g.param("wte.weight", {vocab, model}, sg::on<"dp">(sg::shard<0>));
  sg::output(sg::embedding(ids, wte), "x");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
