// A decoder's queries over an encoder's states of another length, left causal (the default).
// expect: shardgraph: attention .?'attention.?': a causal attention needs queries and keys of one length \(cross-attention is not causal\): q \(batch, heads, seq, head_dim\), k \(batch, heads, source, head_dim\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto q = sg::split_heads(g.input("x", {batch, seq, heads * head_dim}, sg::dtype::f32));
  auto kv = sg::split_heads(g.input("memory", {batch, named<"source">, heads * head_dim}, sg::dtype::f32));
  sg::output(sg::merge_heads(sg::attention(q, kv, kv)), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
