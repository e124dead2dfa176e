// A padding mask given as (seq, batch) instead of HF's attention_mask (batch, seq).
// expect: shardgraph: attention .?'attention.?': the mask must be \(batch, seq\) of q and k: mask \(seq, batch\), q \(batch, heads, seq, head_dim\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto q = sg::split_heads(g.input("q", {batch, seq, heads * head_dim}, sg::dtype::f32));
  auto mask = g.input("mask", {seq, batch}, sg::dtype::i64);
  sg::output(sg::merge_heads(sg::attention(q, q, q, mask, {.causal = false})), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
