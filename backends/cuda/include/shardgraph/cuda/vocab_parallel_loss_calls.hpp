#pragma once
// cuda::backend's calls of the vocabulary-parallel cross-entropy (kernels/vocab_parallel_loss.cuh;
// the dims: include/shardgraph/plan/kernel_dims.hpp, vocab_parallel_dims and loss_dims).
//
//   vocab_statistics    {rows, columns, classes, offset, ignore_index, ranks}  logits, targets -> (rows, 2)
//   vocab_exp_sum       {rows, columns, classes, offset, ignore_index, ranks}  logits, stats -> (rows)
//   vocab_log_sum_exp   {rows}                                                 stats, sums -> (rows)
//   cross_entropy       {rows, columns, classes, divisor, ignore_index}       logits, targets, lse, stats -> (1)
//   cross_entropy_grad  {rows, columns, classes, divisor, ignore_index, offset} logits, targets, dloss, lse
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/norms.cuh>
#include <shardgraph/cuda/kernels/vocab_parallel_loss.cuh>
#include <shardgraph/cuda/memory_moves.hpp>
#include <shardgraph/cuda/scratch.hpp>
#include <shardgraph/cuda/tensor_buffer.hpp>

#include <cstdint>

namespace shardgraph::cuda::detail {

inline kernels::vocab_slice vocab_slice_of(const kernel_call& c) {
  const std::int64_t* d = c.dims;
  const bool statistics = c.kind == op::vocab_statistics || c.kind == op::vocab_exp_sum;
  return {.columns = d[1], .classes = d[2], .offset = statistics ? d[3] : d[5], .ignore_index = d[4],
          .ranks = statistics ? d[5] : 1};
}

inline unsigned row_blocks(std::int64_t rows) { return static_cast<unsigned>((rows + 255) / 256); }

template <class C>
void vocab_parallel_call(backend_state& s, const kernel_call& c) {
  const std::int64_t rows = c.dims[0];
  if (rows == 0) {
    if (c.kind == op::cross_entropy) fill_zero(s, *c.out);
    return;
  }
  const unsigned blocks = static_cast<unsigned>(rows);
  switch (c.kind) {
    case op::vocab_statistics:
      kernels::vocab_statistics_kernel<C><<<blocks, kernels::row_threads, 0, s.stream>>>(
          in(c, 0), in(c, 1), out(*c.out), vocab_slice_of(c));
      return;
    case op::vocab_exp_sum:
      kernels::vocab_exp_sum_kernel<C><<<blocks, kernels::row_threads, 0, s.stream>>>(
          in(c, 0), in(c, 1), out(*c.out), vocab_slice_of(c));
      return;
    case op::vocab_log_sum_exp:
      kernels::vocab_log_sum_exp_kernel<C><<<row_blocks(rows), 256, 0, s.stream>>>(in(c, 0), in(c, 1), out(*c.out), rows);
      return;
    case op::cross_entropy_grad:
      kernels::vocab_cross_entropy_grad_kernel<C><<<blocks, kernels::row_threads, 0, s.stream>>>(
          in(c, 0), in(c, 1), in(c, 2), in(c, 3), out(*c.out), vocab_slice_of(c), C(c.dims[3]), s.bad_target());
      return;
    default: {  // cross_entropy: the rows' losses in scratch, then their sum / divisor
      C* losses = s.scratch.get<C>(scratch_use::row_losses, static_cast<std::size_t>(rows));
      kernels::vocab_loss_rows_kernel<C><<<row_blocks(rows), 256, 0, s.stream>>>(
          in(c, 1), in(c, 2), in(c, 3), losses, rows, {.classes = c.dims[2], .ignore_index = c.dims[4]},
          s.bad_target());
      kernels::sum_rows_kernel<C><<<1, 1024, 0, s.stream>>>(losses, rows, C(c.dims[3]), out(*c.out));
      return;
    }
  }
}

}  // namespace shardgraph::cuda::detail
