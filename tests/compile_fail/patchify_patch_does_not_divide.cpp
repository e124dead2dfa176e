// A patch of 5 over 32 x 32 images, every size fixed: checked when the graph is built.
// expect: shardgraph: patchify .?'patchify.?': the height and width are not multiples of the patch: images \(batch, 3, 32, 32\), patch \(5\)
#include <shardgraph/dsl/convolution.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto images = g.input("images", {batch, fixed<3>, fixed<32>, fixed<32>}, sg::dtype::f32);
  auto w = g.param("w", {model, fixed<75>});
  sg::output(sg::patch_embedding(images, w, g.param("b", {model}), {.patch = fixed<5>, .patches = fixed<36>}), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
