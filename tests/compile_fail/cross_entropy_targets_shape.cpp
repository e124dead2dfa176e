// Targets of shape (batch, seq, vocab), as one-hot rows, where class indices (batch, seq) are expected.
// expect: shardgraph: cross_entropy .?'cross_entropy.?': expects logits \(batch, seq, vocab\) and targets \(batch, seq\): logits \(batch, seq, vocab\), targets \(batch, seq, vocab\)
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto logits = g.input("logits", {batch, seq, vocab}, sg::dtype::f32);
  auto targets = g.input("targets", {batch, seq, vocab}, sg::dtype::i64);
  sg::output(sg::cross_entropy(logits, targets), "loss");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
