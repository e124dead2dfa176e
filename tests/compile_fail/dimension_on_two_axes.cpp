// One tensor dimension sharded on two mesh axes at once.
// expect: shardgraph: parameter .?'wte.weight.?': dimension 0 is sharded on both .?'dp.?' and .?'tp.?'
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto ids = g.input("input_ids", {batch, seq}, sg::dtype::i64);
  auto wte = g.param("wte.weight", {vocab, model}, sg::on<"dp">(sg::shard<0>), sg::on<"tp">(sg::shard<0>));
  sg::output(sg::embedding(ids, wte), "x");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
