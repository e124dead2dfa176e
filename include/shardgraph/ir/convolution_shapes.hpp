#pragma once
// The shape rules of the convolutions' layouts (dsl/convolution.hpp). A forward node arrives with
// the dimensions the caller named already in its shape (patchify: patches and features at 1 and 2;
// unfold1d: length_out at 1); a gradient node with the shape of the forward op's input. Sizes are
// compared here only where every one involved is dim::fixed; otherwise at bind
// (runtime/convolution_sizes.hpp).
#include <cstdint>

#include "shardgraph/ir/graph.hpp"
#include "shardgraph/ir/shape_text.hpp"

namespace shardgraph::detail {

constexpr std::int64_t fixed_size(const dimension* d) { return fixed_size(extent{d}); }

// Records "<why>: images (...), patch (...). <how>" for node i and returns false.
constexpr bool window_mismatch(graph_ref g, int i, std::string_view why, std::string_view label, const shape& x,
                               std::string_view how) {
  if (diagnostic* d = g.report(i)) {
    *d << why << ": " << label << " " << x << ", "
       << (g[i].kind == op::patchify || g[i].kind == op::unpatchify ? "patch" : "kernel") << " ("
       << dimension_name(g[i].window) << ")";
    if (g[i].kind == op::unfold1d) *d << ", stride " << int{g[i].stride} << ", padding " << int{g[i].padding};
    *d << ". " << how;
  }
  return false;
}

// patchify: images (batch, channels, height, width) -> (batch, patches, features).
constexpr bool patchify_shape(graph_ref g, int i, const shape& images, shape& out) {
  const node& n = g[i];
  if (images.rank() != 4)
    return window_mismatch(g, i, "expects images (batch, channels, height, width)", "images", images,
                           "pass pixel values as HF's ViT takes them, channels first");
  if (n.window == nullptr)
    return window_mismatch(g, i, "the patch's side must be one dimension", "images", images,
                           "name it with one dimension, as dim::fixed<16> or dim::named<\"patch\">");
  const extent patches = n.shape[1], features = n.shape[2];
  if (features.first == nullptr || patches.first == nullptr)
    return window_mismatch(
        g, i,
        "the result's patches or features are no dimension (patch_embedding's weight must be (hidden, "
        "features))",
        "images", images,
        "name both, and declare the weight (hidden, features), features = channels * patch * patch");
  const std::int64_t p = fixed_size(n.window), h = fixed_size(images[2]), w = fixed_size(images[3]);
  if (p > 0 && ((h > 0 && h % p != 0) || (w > 0 && w % p != 0)))
    return window_mismatch(g, i, "the height and width are not multiples of the patch", "images", images,
                           "choose a patch that divides both, or resize the images");
  const std::int64_t c = fixed_size(images[1]), given_patches = fixed_size(patches);
  if (p > 0 && h > 0 && w > 0 && given_patches > 0 && given_patches != (h / p) * (w / p))
    return window_mismatch(g, i, "the patches are not (height / patch) * (width / patch)", "images", images,
                           "size the result's patches dimension as that product");
  if (p > 0 && c > 0 && fixed_size(features) > 0 && fixed_size(features) != c * p * p)
    return window_mismatch(g, i, "the features are not channels * patch * patch", "images", images,
                           "give patch_embedding a weight (hidden, channels * patch * patch)");
  out = shape{images[0], patches, features};
  return true;
}

// unfold1d: x (batch, channels, length) -> (batch, length_out, channels * kernel).
constexpr bool unfold1d_shape(graph_ref g, int i, const shape& x, shape& out) {
  const node& n = g[i];
  if (x.rank() != 3)
    return window_mismatch(g, i, "expects x (batch, channels, length)", "x", x,
                           "pass the signal channels first, as torch's conv1d takes it");
  if (n.window == nullptr || x[1].is_product() || n.shape[1].first == nullptr)
    return window_mismatch(g, i,
                           "the kernel and the channels must each be one dimension (the features are "
                           "channels * kernel), and length_out a dimension",
                           "x", x, "name each with one dimension, as dim::fixed<3>");
  if (n.stride < 1)
    return window_mismatch(g, i, "the stride must be 1 to 127 and the padding 0 to 127", "x", x,
                           "give a stride and padding in these ranges");
  const std::int64_t length = fixed_size(x[2]), kernel = fixed_size(n.window),
                     length_out = fixed_size(n.shape[1]);
  if (length > 0 && kernel > 0 && length_out > 0 &&
      (length + 2 * n.padding < kernel || length_out != (length + 2 * n.padding - kernel) / n.stride + 1))
    return window_mismatch(g, i, "length_out is not (length + 2 padding - kernel) / stride + 1", "x", x,
                           "size length_out by torch's formula, or pad the length up to the kernel");
  out = shape{x[0], n.shape[1], x[1] * extent{n.window}};
  return true;
}

// unpatchify and fold1d: dy of the forward op's result -> the shape of its input (the node's own).
constexpr bool folded_shape(graph_ref g, int i, const shape& dy, shape& out) {
  const node& n = g[i];
  const bool fits = n.kind == op::unpatchify ? dy.rank() == 3 && n.shape.rank() == 4
                                             : dy.rank() == 3 && n.shape.rank() == 3;
  if (!fits || !(dy[0] == n.shape[0]))
    return window_mismatch(g, i, "the gradient does not fit the input's shape", "dy", dy,
                           "this is a bug in autodiff; please report it");
  out = n.shape;
  return true;
}

}  // namespace shardgraph::detail
