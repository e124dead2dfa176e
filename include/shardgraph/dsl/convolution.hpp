#pragma once
// Convolutions as products: a layout op gathers each window of the input into one row (im2col),
// then a linear multiplies the rows by the weight, as HF's Conv2d / Conv1d compute. Shapes are
// global; the sizes are checked at bind (runtime/convolution_sizes.hpp), or when the graph is
// built where every size involved is dim::fixed.
//
//   images (batch, channels, height, width)        // HF pixel_values
//   patch_embedding(images, weight, bias, {.patch = dim::fixed<16>, .patches = dim::named<"patches">})
//     = linear(patchify(images, ...), weight (hidden, features), out_in) + bias (hidden)
//     -> (batch, patches, hidden)                  // HF: projection(x).flatten(2).transpose(1, 2)
//
//   x (batch, channels, length)                    // Whisper's input_features
//   conv1d(x, weight, bias,
//          {.kernel = dim::fixed<3>, .length_out = dim::named<"frames">, .stride = 2, .padding = 1})
//     = transpose(linear(unfold1d(x, ...), weight (out, channels*kernel), out_in) + bias (out), 1, 2)
//     -> (batch, out, length_out)                  // torch's conv1d
#include "shardgraph/dsl/ops.hpp"

namespace shardgraph {

// A square patch, its stride its side (ViT's patch embedding, a Conv2d with stride = kernel).
struct patch_grid {
  extent patch;    // the patch's side, one dimension (HF patch_size): dim::fixed<16>, dim::named<"patch">
  extent patches;  // the patches of an image, (height / patch) * (width / patch), row by row
};

// images (batch, channels, height, width) -> (batch, patches, features): row (b, i * (width /
// patch) + j) holds the patch whose top-left pixel is (i * patch, j * patch), its features ordered
// (channel, row, column), so that features = channels * patch * patch and HF's Conv2d weight
// (hidden, channels, patch, patch), read as (hidden, features), multiplies it. Checked at bind:
// height and width divisible by patch, patches and features as above. Placements: batch sharded
// stays sharded; channels sharded shard the features; height or width sharded is gathered first;
// Partial passes. Its gradient is the inverse layout, unpatchify.
constexpr tensor patchify(tensor images, patch_grid grid, extent features) {
  node n;
  n.kind = op::patchify;
  n.inputs[n.input_count++] = images.id;
  n.type = images.builder->value()[images.id].type;
  n.window = grid.patch.first;
  n.shape = shape{extent{}, grid.patches, features};
  if (grid.patch.is_product()) n.window = nullptr;  // refused by the shape rule
  return images.builder->make(n);
}

// HF's ViT / CLIP patch embedding: images (batch, channels, height, width), weight (hidden,
// features) where features = channels * patch * patch (HF's (hidden, channels, patch, patch) in
// the same order: load it as (hidden, features)), bias (hidden) -> (batch, patches, hidden), equal
// to Conv2d(kernel = stride = patch)(images).flatten(2).transpose(1, 2). A weight sharded on its
// hidden dimension (tensor parallel) gives a result sharded on hidden, as a linear's.
// Without a bias: CLIP's vision embeddings (Conv2d(..., bias=False)).
constexpr tensor patch_embedding(tensor images, tensor weight, patch_grid grid) {
  const shape& w = weight.builder->value()[weight.id].shape;
  const extent features = w.rank() == 2 ? w[1] : extent{};
  return linear(patchify(images, grid, features), weight, weight_layout::out_in);
}
constexpr tensor patch_embedding(tensor images, tensor weight, tensor bias, patch_grid grid) {
  return add_bias(patch_embedding(images, weight, grid), bias);
}

// A 1-D convolution's window: kernel and length_out are dimensions; stride and padding numbers
// of the graph (1 to 127, 0 to 127).
struct conv1d_window {
  extent kernel;      // the kernel's length, one dimension: dim::fixed<3>
  extent length_out;  // (length + 2 padding - kernel) / stride + 1, checked at bind
  int stride = 1;
  int padding = 0;  // zeros on each end of the length
};

// x (batch, channels, length) -> (batch, length_out, channels * kernel): row (b, t) holds the
// window x[b, c, t * stride - padding + k] (0 outside x) ordered (channel c, offset k), so that
// torch's Conv1d weight (out, channels, kernel), read as (out, channels * kernel), multiplies it.
// Placements: batch sharded stays sharded; channels sharded shard the features (channels is the
// product's first factor); length sharded is gathered first; Partial passes. Its gradient is
// fold1d, which sums the windows that overlap.
constexpr tensor unfold1d(tensor x, conv1d_window w) {
  node n;
  n.kind = op::unfold1d;
  n.inputs[n.input_count++] = x.id;
  const node& in = x.builder->value()[x.id];
  n.type = in.type;
  n.window = w.kernel.is_product() ? nullptr : w.kernel.first;
  const bool in_range = w.stride >= 1 && w.stride <= 127 && w.padding >= 0 && w.padding <= 127;
  n.stride = static_cast<std::int8_t>(in_range ? w.stride : 0);  // 0: refused by the shape rule
  n.padding = static_cast<std::int8_t>(in_range ? w.padding : 0);
  n.shape = shape{extent{}, w.length_out};
  return x.builder->make(n);
}

// torch's conv1d: x (batch, channels, length), weight (out, channels * kernel) (torch's (out,
// channels, kernel) in the same order), bias (out) -> (batch, out, length_out). A weight sharded on
// out (column parallel) gives a result sharded on out; one sharded on channels * kernel (row
// parallel) reads x sharded on channels and gives a Partial result.
constexpr tensor conv1d(tensor x, tensor weight, tensor bias, conv1d_window w) {
  return transpose(linear(unfold1d(x, w), weight, bias, weight_layout::out_in), 1, 2);
}

}  // namespace shardgraph
