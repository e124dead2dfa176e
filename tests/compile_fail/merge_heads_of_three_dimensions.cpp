// merge_heads of a tensor that was never split into heads.
// expect: shardgraph: merge_heads .?'merge_heads.?': expects \(batch, heads, seq, head_dim\): x \(batch, seq, model\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  sg::output(sg::merge_heads(x), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
