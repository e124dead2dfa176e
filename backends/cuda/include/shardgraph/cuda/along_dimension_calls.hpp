#pragma once
// cuda::backend's calls along one dimension (compute/compute_backend.hpp's table):
//   concat      {outer, inner, n0, n1, n2, n3}    each part placed at the sum of the parts before it
//   slice       {outer, n, inner, start, size}    the block taken
//   slice_grad  {outer, n, inner, start, size}    zeros, then dy placed at start
//   sum, mean   {outer, n, inner, divisor}        one thread per output element sums its n inputs
//   broadcast   {outer, n, inner, divisor}
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/along_dimension.cuh>
#include <shardgraph/cuda/memory_moves.hpp>
#include <shardgraph/cuda/tensor_buffer.hpp>
#include <shardgraph/ir/op.hpp>

#include <cstdint>

namespace shardgraph::cuda::detail {

template <class C, class I>
void along_dimension(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  const unsigned threads = 256;
  // part (outer, size, inner) into out (outer, n, inner) at start
  const auto place = [&](kernels::ref part, std::int64_t n, std::int64_t inner, std::int64_t start,
                         std::int64_t size) {
    const std::int64_t numel = d[0] * size * inner;
    if (numel == 0) return;
    kernels::block_copy_kernel<C, I, true><<<kernels::blocks_for(numel, threads), threads, 0, s.stream>>>(
        part, out(o), n, inner, start, size, numel);
  };
  switch (c.kind) {
    case op::concat: {
      const std::int64_t total = d[2] + d[3] + d[4] + d[5];
      std::int64_t start = 0;
      for (int k = 0; k < 4 && c.in[k] != nullptr; ++k) {
        place(in(c, k), total, d[1], start, d[2 + k]);
        start += d[2 + k];
      }
      return;
    }
    case op::slice:
      kernels::block_copy_kernel<C, I, false><<<kernels::blocks_for(o.numel(), threads), threads, 0, s.stream>>>(
          in(c, 0), out(o), d[1], d[2], d[3], d[4], o.numel());
      return;
    case op::slice_grad:
      fill_zero(s, o);
      return place(in(c, 0), d[1], d[2], d[3], d[4]);
    case op::sum:
    case op::mean:
      kernels::sum_along_kernel<C, I><<<kernels::blocks_for(o.numel(), threads), threads, 0, s.stream>>>(
          in(c, 0), out(o), d[1], d[2], d[3], o.numel());
      return;
    default:  // broadcast
      kernels::broadcast_along_kernel<C, I><<<kernels::blocks_for(o.numel(), threads), threads, 0, s.stream>>>(
          in(c, 0), out(o), d[1], d[2], d[3], o.numel());
      return;
  }
}

}  // namespace shardgraph::cuda::detail
