#pragma once
// Dropout (op::dropout): out = x / (1 - p) where the mask keeps an element, else 0; the mask is
// compute/dropout_mask.hpp's, the cpu backend's (cpu/dropout.hpp), drawn per element from its index
// in the whole tensor. One thread per element of the local block (d0, d1, d2, d3).
#include <shardgraph/compute/dropout_mask.hpp>
#include <shardgraph/cuda/kernels/element_access.cuh>

#include <cuda_runtime.h>

#include <cstdint>

namespace shardgraph::cuda::kernels {

struct dropout_args {
  std::int64_t dims[4];
  std::int64_t numel;
  std::uint64_t stream;     // compute::dropout_stream(seed, step, layer)
  std::uint64_t threshold;  // compute::dropout_threshold(p)
  double scale;             // 1 / (1 - p)
  compute::dropout_mask mask;
};

template <class C, class I>
__global__ void dropout_kernel(ref x, mut_ref out, dropout_args a) {
  for (I e = global_thread<I>(); e < static_cast<I>(a.numel); e += grid_threads<I>()) {
    I rest = e;
    std::int64_t at[4];
    for (int k = 3; k >= 0; --k) {
      const I n = static_cast<I>(a.dims[k]);
      at[k] = static_cast<std::int64_t>(rest % n);
      rest /= n;
    }
    const std::uint64_t index = compute::dropout_index(a.mask, at[0], at[1], at[2], at[3]);
    const bool keep = compute::dropout_keeps(a.stream, index, a.threshold);
    store<C>(out, e, keep ? load<C>(x, e) * static_cast<C>(a.scale) : C(0));
  }
}

}  // namespace shardgraph::cuda::kernels
