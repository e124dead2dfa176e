#pragma once
// The convolutions' layouts as index maps, one thread per element of the result (as
// cpu/unfold.hpp's formulas):
//   patchify    x (batch, channels, height, width) -> rows (batch, patches, channels * patch * patch)
//   unpatchify  rows -> x, its inverse
//   unfold1d    x (batch, channels, length) -> rows (batch, length_out, channels * kernel), 0 in the padding
//   fold1d      rows -> x, each element the sum of the window entries that read it (a gather: no atomics)
#include <shardgraph/cuda/kernels/element_access.cuh>

#include <cuda_runtime.h>

#include <cstdint>

namespace shardgraph::cuda::kernels {

struct patch_args {
  std::int64_t batch, channels, height, width, patch;
  std::int64_t numel;  // batch * channels * height * width, on either side
};

// Patchify: e indexes rows (b, patch i * columns + j, feature (c * patch + r) * patch + s) and
// reads pixel (b, c, i * patch + r, j * patch + s); Inverse: e indexes the pixels and reads rows.
template <class C, bool Inverse, class I>
__global__ void patch_kernel(ref in, mut_ref out, patch_args a) {
  const I P = static_cast<I>(a.patch), W = static_cast<I>(a.width), H = static_cast<I>(a.height);
  const I channels = static_cast<I>(a.channels), columns = W / P, patches = (H / P) * columns;
  const I features = channels * P * P;
  for (I e = global_thread<I>(); e < static_cast<I>(a.numel); e += grid_threads<I>()) {
    I image, row;
    if constexpr (Inverse) {
      const I w = e % W, y = (e / W) % H, c = (e / (W * H)) % channels, b = e / (W * H * channels);
      image = e;
      row = (b * patches + (y / P) * columns + w / P) * features + (c * P + y % P) * P + w % P;
      store<C>(out, image, load<C>(in, row));
    } else {
      const I feature = e % features, patch = (e / features) % patches, b = e / (features * patches);
      const I s = feature % P, r = (feature / P) % P, c = feature / (P * P);
      row = e;
      image = ((b * channels + c) * H + (patch / columns) * P + r) * W + (patch % columns) * P + s;
      store<C>(out, row, load<C>(in, image));
    }
  }
}

struct window_args {
  std::int64_t batch, channels, length, kernel, stride, padding, windows;
  std::int64_t
      numel;  // of the result: batch * windows * channels * kernel (unfold), batch * channels * length (fold)
};

// unfold1d: e indexes rows (b, t, c * kernel + k) and reads x[b][c][t * stride - padding + k].
template <class C, class I>
__global__ void unfold1d_kernel(ref x, mut_ref rows, window_args a) {
  const I K = static_cast<I>(a.kernel), channels = static_cast<I>(a.channels), L = static_cast<I>(a.length);
  const I T = static_cast<I>(a.windows);
  for (I e = global_thread<I>(); e < static_cast<I>(a.numel); e += grid_threads<I>()) {
    const I k = e % K, c = (e / K) % channels, t = (e / (K * channels)) % T, b = e / (K * channels * T);
    // I may be unsigned: the padded position t * stride + k is read when padding <= it < padding + length
    const I padded = t * static_cast<I>(a.stride) + k, P = static_cast<I>(a.padding);
    const bool inside = padded >= P && padded - P < L;
    store<C>(rows, e, inside ? load<C>(x, (b * channels + c) * L + (padded - P)) : C(0));
  }
}

// fold1d: e indexes dx (b, c, l) and sums the entries (t, c * kernel + k) with t * stride =
// l + padding - k.
template <class C, class I>
__global__ void fold1d_kernel(ref rows, mut_ref dx, window_args a) {
  const I K = static_cast<I>(a.kernel), channels = static_cast<I>(a.channels), L = static_cast<I>(a.length);
  const I T = static_cast<I>(a.windows), S = static_cast<I>(a.stride);
  for (I e = global_thread<I>(); e < static_cast<I>(a.numel); e += grid_threads<I>()) {
    const I l = e % L, c = (e / L) % channels, b = e / (L * channels);
    C sum = C(0);
    for (I k = 0; k < K; ++k) {
      const I padded = l + static_cast<I>(a.padding);  // = t * stride + k; I may be unsigned
      if (padded >= k && (padded - k) % S == 0 && (padded - k) / S < T)
        sum += load<C>(rows, ((b * T + (padded - k) / S) * channels + c) * K + k);
    }
    store<C>(dx, e, sum);
  }
}

}  // namespace shardgraph::cuda::kernels
