// A custom op whose shape rule rejects its inputs: the message names the op, the node and the inputs.
// expect: shardgraph: pairwise .?'mix.?': x and y differ in shape: input 0 \(batch, seq, model\), input 1 \(batch, seq, ffn\). give both the same shape
#include <span>
#include <string_view>

#include <shardgraph/dsl/custom.hpp>
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
struct pairwise {
  static constexpr std::string_view name = "pairwise";
  static constexpr int inputs = 2;
  static constexpr std::string_view sharding = "b s d, b s d -> b s d";
  static constexpr sg::shape_result output_shape(std::span<const sg::shape> in) {
    if (!(in[0] == in[1])) return sg::shape_error("x and y differ in shape", "give both the same shape");
    return in[0];
  }
};
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto y = g.input("y", {batch, seq, ffn}, sg::dtype::f32);
  sg::output(sg::apply<pairwise>({x, y}, 0.0, "mix"), "out");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
