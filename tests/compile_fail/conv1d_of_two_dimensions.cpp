// A 1-D convolution of a (batch, length) signal: it needs its channels, (batch, channels, length).
// expect: shardgraph: unfold1d .?'unfold1d.?': expects x \(batch, channels, length\): x \(batch, seq\), kernel \(3\), stride 1, padding 1
#include <shardgraph/dsl/convolution.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq}, sg::dtype::f32);
  auto w = g.param("w", {model, model * fixed<3>});
  auto window = sg::conv1d_window{.kernel = fixed<3>, .length_out = seq, .padding = 1};
  sg::output(sg::conv1d(x, w, g.param("b", {model}), window), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
