// split_heads of a last dimension that is not heads * head_dim: the sizes cannot be reshaped.
// expect: shardgraph: split_heads .?'split_heads.?': expects \(batch, seq, heads \* head_dim\): x \(batch, seq, model\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  sg::output(sg::split_heads(x), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
