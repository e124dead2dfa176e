// The inner dimensions of a product differ: (batch, seq, model) @ (batch, ffn, seq).
// expect: shardgraph: matmul .?'matmul.?': the inner dimensions differ \(a.?'s last, b.?'s second to last\): a \(batch, seq, model\), b \(batch, ffn, seq\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto a = g.input("a", {batch, seq, model}, sg::dtype::f32);
  auto b = g.input("b", {batch, ffn, seq}, sg::dtype::f32);
  sg::output(sg::matmul(a, b), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
