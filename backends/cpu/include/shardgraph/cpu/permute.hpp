#pragma once
// The permutation of a tensor's dimensions (op::permute), up to rank 4.
#include <cstdint>

#include "shardgraph/compute/permute_order.hpp"
#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

// out = x permuted: x (dims[0], dims[1], dims[2], dims[3]); the result's dimension k is x's
// dimension permuted_from(order, k). x and out must not overlap.
template <class T>
void permute(const T* x, T* out, const std::int64_t dims[4], std::int64_t order) {
  constexpr int rank = compute::permute_rank;
  std::int64_t x_stride[rank];
  x_stride[rank - 1] = 1;
  for (int k = rank - 2; k >= 0; --k) x_stride[k] = x_stride[k + 1] * dims[k + 1];
  detail::check_pointer("cpu::permute", "x", x, x_stride[0] * dims[0]);
  detail::check_pointer("cpu::permute", "out", out, x_stride[0] * dims[0]);
  std::int64_t n[rank], stride[rank];  // the result's dims, and their strides in x
  for (int k = 0; k < rank; ++k) {
    n[k] = dims[compute::permuted_from(order, k)];
    stride[k] = x_stride[compute::permuted_from(order, k)];
  }
  std::int64_t o = 0;
  for (std::int64_t i0 = 0; i0 < n[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < n[1]; ++i1)
      for (std::int64_t i2 = 0; i2 < n[2]; ++i2)
        for (std::int64_t i3 = 0; i3 < n[3]; ++i3)
          out[o++] = x[i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3]];
}

}  // namespace shardgraph::cpu
