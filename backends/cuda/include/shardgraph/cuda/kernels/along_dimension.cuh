#pragma once
// The kernels along one dimension (op::concat, slice, slice_grad, sum, mean, broadcast), each
// tensor seen as (outer, n, inner), row-major; one thread per element written, grid-stride.
#include <shardgraph/cuda/kernels/element_access.cuh>

#include <cuda_runtime.h>

#include <cstdint>

namespace shardgraph::cuda::kernels {

// A block (outer, size, inner) of a tensor (outer, n, inner) at [:, start:start + size, :]: Place
// false takes it, out (outer, size, inner) = from's block; Place true puts from (outer, size, inner)
// there, leaving the rest of out as it is. numel = outer size inner, one thread per element of it.
template <class C, class I, bool Place>
__global__ void block_copy_kernel(ref from, mut_ref out, std::int64_t n, std::int64_t inner, std::int64_t start,
                                  std::int64_t size, std::int64_t numel) {
  const I N = static_cast<I>(n), K = static_cast<I>(inner), S = static_cast<I>(size), B = static_cast<I>(start);
  for (I e = global_thread<I>(); e < static_cast<I>(numel); e += grid_threads<I>()) {
    const I i = e % K, j = (e / K) % S, o = e / (K * S);
    const I in_whole = (o * N + B + j) * K + i;
    if constexpr (Place)
      store<C>(out, in_whole, load<C>(from, e));
    else
      store<C>(out, e, load<C>(from, in_whole));
  }
}

// out (outer, inner) = the sum over j of x (outer, n, inner)[:, j, :] / divisor, in C; numel =
// outer inner.
template <class C, class I>
__global__ void sum_along_kernel(ref x, mut_ref out, std::int64_t n, std::int64_t inner, std::int64_t divisor,
                                 std::int64_t numel) {
  const I N = static_cast<I>(n), K = static_cast<I>(inner);
  for (I e = global_thread<I>(); e < static_cast<I>(numel); e += grid_threads<I>()) {
    const I i = e % K, o = e / K;
    C sum = C(0);
    for (I j = 0; j < N; ++j) sum += load<C>(x, (o * N + j) * K + i);
    store<C>(out, e, sum / static_cast<C>(divisor));
  }
}

// out (outer, n, inner) = x (outer, inner) / divisor for every j; numel = outer n inner.
template <class C, class I>
__global__ void broadcast_along_kernel(ref x, mut_ref out, std::int64_t n, std::int64_t inner,
                                       std::int64_t divisor, std::int64_t numel) {
  const I N = static_cast<I>(n), K = static_cast<I>(inner);
  for (I e = global_thread<I>(); e < static_cast<I>(numel); e += grid_threads<I>())
    store<C>(out, e, load<C>(x, (e / (K * N)) * K + e % K) / static_cast<C>(divisor));
}

}  // namespace shardgraph::cuda::kernels
