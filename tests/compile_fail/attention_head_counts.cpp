// Keys and values split into different head counts.
// expect: shardgraph: attention .?'attention.?': k and v have different shapes .*: k \(batch, kv_heads, seq, head_dim\), v \(batch, heads, seq, head_dim\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto q = sg::split_heads(g.input("q", {batch, seq, heads * head_dim}, sg::dtype::f32));
  auto k = sg::split_heads(g.input("k", {batch, seq, kv_heads * head_dim}, sg::dtype::f32));
  auto v = sg::split_heads(g.input("v", {batch, seq, heads * head_dim}, sg::dtype::f32));
  sg::output(sg::merge_heads(sg::attention(q, k, v)), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
