// A concat whose parts and result are fixed at compile time, and do not add up.
// expect: shardgraph: concat .?'concat.?': the parts.?' sizes along dimension 1 add up to 5, not the result.?'s 6: part 0 \(batch, 1, model\), result \(batch, 6, model\). name the result.?'s dimension dim::fixed<5>
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto cls = g.input("cls", {batch, fixed<1>, model}, sg::dtype::f32);
  auto patches = g.input("patches", {batch, fixed<4>, model}, sg::dtype::f32);
  sg::output(sg::concat({cls, patches}, 1, fixed<6>), "tokens");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
