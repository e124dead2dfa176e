// A concat of parts that differ in a dimension other than the one they are joined along.
// expect: shardgraph: concat .?'concat.?': the parts differ in rank, dtype or a dimension other than 1: part 0 \(batch, seq, model\), part 1 \(batch, seq, ffn\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto y = g.input("y", {batch, seq, ffn}, sg::dtype::f32);
  sg::output(sg::concat({x, y}, 1, sg::dim::named<"tokens">), "joined");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
