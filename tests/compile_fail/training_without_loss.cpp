// A training program whose graph has no output named loss.
// expect: shardgraph: output .?'logits.?': training needs a scalar output named .?"loss.?"
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  sg::output(sg::linear(x, g.param("lm_head.weight", {model, vocab})), "logits");
  return g.finish();
}
constexpr auto program = sg::compile<build_model, sg::training{}>();
int main() {}
