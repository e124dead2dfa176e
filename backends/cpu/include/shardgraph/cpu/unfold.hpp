#pragma once
// The convolutions' layouts (compute/compute_backend.hpp's table): each window of the input
// gathered into one row (patchify, unfold1d), and back (unpatchify, fold1d). Local sizes; the
// input and the output must not overlap.
#include <cstdint>
#include <string>

#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

namespace detail {

// Moves the elements of an image x (batch, channels, height, width) to or from (Inverse) their
// places in rows (batch, (height / patch) * (width / patch), channels * patch * patch): row
// b * patches + i * (width / patch) + j, feature (c * patch + r) * patch + s holds
// x[b][c][i * patch + r][j * patch + s].
template <bool Inverse, class T>
void move_patches(const char* kernel, const T* from, T* to, std::int64_t batch, std::int64_t channels,
                  std::int64_t height, std::int64_t width, std::int64_t patch) {
  check_size(kernel, "batch", batch);
  check_size(kernel, "channels", channels);
  if (patch <= 0 || height < 0 || width < 0 || height % patch != 0 || width % patch != 0)
    fail(kernel,
         "patch = " + std::to_string(patch) + " does not divide height = " + std::to_string(height) +
             " and width = " + std::to_string(width),
         "pass a patch that divides both (bind checks this for a graph's patchify)");
  check_pointer(kernel, "the input", from, batch * channels * height * width);
  check_pointer(kernel, "the output", to, batch * channels * height * width);
  const std::int64_t columns = width / patch, patches = (height / patch) * columns;
  const std::int64_t features = channels * patch * patch;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t y = 0; y < height; ++y)
        for (std::int64_t w = 0; w < width; ++w) {
          const std::int64_t image = ((b * channels + c) * height + y) * width + w;
          const std::int64_t row = b * patches + (y / patch) * columns + w / patch;
          const std::int64_t feature = row * features + (c * patch + y % patch) * patch + w % patch;
          if constexpr (Inverse)
            to[image] = from[feature];
          else
            to[feature] = from[image];
        }
}

// Moves the elements of a signal x (batch, channels, length) into windows (batch, length_out,
// channels * kernel), windows[b][t][c * kernel + k] = x[b][c][t * stride - padding + k] and 0
// outside x; or (Fold) the transpose: x = 0, then each window entry added to the element it read.
// length_out = (length + 2 padding - kernel) / stride + 1.
template <bool Fold, class T>
void move_windows(const char* name, const T* from, T* to, std::int64_t batch, std::int64_t channels,
                  std::int64_t length, std::int64_t kernel, std::int64_t stride, std::int64_t padding) {
  check_size(name, "batch", batch);
  check_size(name, "channels", channels);
  if (length < 0 || kernel <= 0 || stride <= 0 || padding < 0 || length + 2 * padding < kernel)
    fail(name,
         "length = " + std::to_string(length) + ", kernel = " + std::to_string(kernel) + ", stride = " +
             std::to_string(stride) + ", padding = " + std::to_string(padding) + " give no window",
         "pass a positive kernel and stride, and a padded length of at least the kernel");
  const std::int64_t windows = (length + 2 * padding - kernel) / stride + 1;
  const std::int64_t signal = batch * channels * length, rows = batch * windows * channels * kernel;
  check_pointer(name, "the input", from, Fold ? rows : signal);
  check_pointer(name, "the output", to, Fold ? signal : rows);
  if constexpr (Fold)
    for (std::int64_t i = 0; i < signal; ++i) to[i] = T(0);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < windows; ++t)
      for (std::int64_t c = 0; c < channels; ++c)
        for (std::int64_t k = 0; k < kernel; ++k) {
          const std::int64_t l = t * stride - padding + k,
                             row = ((b * windows + t) * channels + c) * kernel + k;
          const bool inside = l >= 0 && l < length;
          if constexpr (Fold) {
            if (inside) to[(b * channels + c) * length + l] += from[row];
          } else {
            to[row] = inside ? from[(b * channels + c) * length + l] : T(0);
          }
        }
}

}  // namespace detail

// patchify: x (batch, channels, height, width) -> out (batch, patches, channels * patch * patch).
template <class T>
void patchify(const T* x, T* out, std::int64_t batch, std::int64_t channels, std::int64_t height,
              std::int64_t width, std::int64_t patch) {
  detail::move_patches<false>("cpu::patchify", x, out, batch, channels, height, width, patch);
}

// unpatchify, patchify's inverse: dy (batch, patches, channels * patch * patch) -> dx (batch,
// channels, height, width).
template <class T>
void unpatchify(const T* dy, T* dx, std::int64_t batch, std::int64_t channels, std::int64_t height,
                std::int64_t width, std::int64_t patch) {
  detail::move_patches<true>("cpu::unpatchify", dy, dx, batch, channels, height, width, patch);
}

// unfold1d: x (batch, channels, length) -> out (batch, length_out, channels * kernel),
// out[b][t][c * kernel + k] = x[b][c][t * stride - padding + k], 0 outside x.
template <class T>
void unfold1d(const T* x, T* out, std::int64_t batch, std::int64_t channels, std::int64_t length,
              std::int64_t kernel, std::int64_t stride, std::int64_t padding) {
  detail::move_windows<false>("cpu::unfold1d", x, out, batch, channels, length, kernel, stride, padding);
}

// fold1d, unfold1d's transpose: dy (batch, length_out, channels * kernel) -> dx (batch, channels,
// length), dx[b][c][l] = the sum of dy[b][t][c * kernel + k] over the windows with t * stride -
// padding + k = l.
template <class T>
void fold1d(const T* dy, T* dx, std::int64_t batch, std::int64_t channels, std::int64_t length,
            std::int64_t kernel, std::int64_t stride, std::int64_t padding) {
  detail::move_windows<true>("cpu::fold1d", dy, dx, batch, channels, length, kernel, stride, padding);
}

}  // namespace shardgraph::cpu
