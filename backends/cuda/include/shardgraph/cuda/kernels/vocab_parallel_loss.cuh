#pragma once
// The vocabulary-parallel cross-entropy's kernels (include/shardgraph/passes/vocab_parallel_loss.hpp;
// formulas: backends/cpu/include/shardgraph/cpu/vocab_parallel_loss.hpp). This rank holds the logits'
// columns [offset, offset + columns) of a vocabulary whose first `classes` columns are classes, one
// slice of `ranks`. A block per row, but for the row-wise scalar kernels (a thread per row).
#include <shardgraph/cuda/kernels/element_access.cuh>
#include <shardgraph/cuda/kernels/softmax.cuh>

#include <cuda_runtime.h>

#include <cstdint>

namespace shardgraph::cuda::kernels {

struct vocab_slice {
  std::int64_t columns = 0, classes = 0, offset = 0, ignore_index = -100, ranks = 1;
  // The slice's columns that are classes: [0, class_columns()).
  __host__ __device__ std::int64_t class_columns() const {
    const std::int64_t n = classes - offset;
    return n < 0 ? 0 : n > columns ? columns : n;
  }
};

// The *bad flag's value for a row whose log-sum-exp overflowed (1: a target outside the vocabulary).
inline constexpr int vocab_loss_overflow = 2;

// The log-sum-exp of the row's slice of classes (n > 0 on every thread of the block).
template <class C>
__device__ C slice_log_sum_exp(ref logits, std::int64_t base, std::int64_t n) {
  C row_max, sum;
  row_softmax_statistics<C>(logits, base, n, C(1), row_max, sum);
  return row_max + log(sum);
}

// stats (rows, 2) = [the target's logit where this slice holds it, else 0; the slice's log-sum-exp /
// ranks, 0 where it holds no class].
template <class C>
__global__ void vocab_statistics_kernel(ref logits, ref targets, mut_ref stats, vocab_slice v) {
  const std::int64_t row = blockIdx.x, base = row * v.columns, n = v.class_columns();
  const C part = n > 0 ? slice_log_sum_exp<C>(logits, base, n) / C(v.ranks) : C(0);
  if (threadIdx.x != 0) return;
  const std::int64_t target = load_id(targets, row), column = target - v.offset;
  const bool holds = target != v.ignore_index && column >= 0 && column < n;
  store<C>(stats, 2 * row, holds ? load<C>(logits, base + column) : C(0));
  store<C>(stats, 2 * row + 1, part);
}

// sums (rows) = exp(the slice's log-sum-exp - m), m = stats[row][1] once all-reduced.
template <class C>
__global__ void vocab_exp_sum_kernel(ref logits, ref stats, mut_ref sums, vocab_slice v) {
  const std::int64_t row = blockIdx.x, n = v.class_columns();
  const C lse = n > 0 ? slice_log_sum_exp<C>(logits, row * v.columns, n) : C(0);
  if (threadIdx.x == 0) store<C>(sums, row, n > 0 ? exp(lse - load<C>(stats, 2 * row + 1)) : C(0));
}

// lse (rows) = m + log(sums), a thread per row.
template <class C>
__global__ void vocab_log_sum_exp_kernel(ref stats, ref sums, mut_ref lse, std::int64_t rows) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row < rows) store<C>(lse, row, load<C>(stats, 2 * row + 1) + log(load<C>(sums, row)));
}

// losses[row] = lse - the target's logit, 0 for a row without a loss; a target outside the classes
// sets *bad to 1, an overflowed log-sum-exp to vocab_loss_overflow. A thread per row.
template <class C>
__global__ void vocab_loss_rows_kernel(ref targets, ref lse, ref stats, C* losses, std::int64_t rows,
                                       loss_targets t, int* bad) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const std::int64_t target = load_id(targets, row);
  losses[row] = C(0);
  if (without_loss(target, t)) {
    if (target != t.ignore_index) *bad = 1;
    return;
  }
  const C l = load<C>(lse, row);
  if (isinf(l) && l > 0) *bad = vocab_loss_overflow;
  losses[row] = l - load<C>(stats, 2 * row);
}

// dlogits = (exp(x - lse) - onehot(target)) * loss_gradient[0] / divisor on the slice's classes, 0 in
// its padding columns and in rows without a loss. May write over the logits (each element is read
// before it is written, by its thread).
template <class C>
__global__ void vocab_cross_entropy_grad_kernel(ref logits, ref targets, ref loss_gradient, ref lse,
                                                mut_ref dlogits, vocab_slice v, C divisor, int* bad) {
  const std::int64_t row = blockIdx.x, base = row * v.columns, n = v.class_columns();
  const std::int64_t target = load_id(targets, row);
  const loss_targets t{.classes = v.classes, .ignore_index = v.ignore_index};
  if (without_loss(target, t)) {
    if (threadIdx.x == 0 && target != t.ignore_index) *bad = 1;
    for (std::int64_t j = threadIdx.x; j < v.columns; j += blockDim.x) store<C>(dlogits, base + j, C(0));
    return;
  }
  const C scale = load<C>(loss_gradient, 0) / divisor, row_lse = load<C>(lse, row);
  for (std::int64_t j = threadIdx.x; j < v.columns; j += blockDim.x) {
    const C p = j < n ? exp(load<C>(logits, base + j) - row_lse) : C(0);
    store<C>(dlogits, base + j, (p - (v.offset + j == target ? C(1) : C(0))) * scale);
  }
}

}  // namespace shardgraph::cuda::kernels
