#pragma once
// Row softmax kernels: softmax and its gradient, the causal softmax of attention's scores and its
// gradient, and the fused softmax cross-entropy (loss and gradient in one pass each, never
// materialising the probabilities), or both from one read of the logits. A block per row, but for
// the persistent staged kernel at the end. Formulas: cpu/softmax.hpp, cpu/cross_entropy.hpp and
// their backward files.
//
// Every cross-entropy kernel takes its rows' `loss_targets`: a row whose target is ignore_index has
// loss 0, a zero gradient and does not count; only the first `classes` columns are classes (a
// padded vocabulary's columns [classes, vocab) are left out of the softmax and get a zero
// gradient); any other target outside [0, classes) sets *bad.
#include <shardgraph/cuda/kernels/element_access.cuh>
#include <shardgraph/cuda/kernels/vectorized.cuh>

#include <cuda_pipeline_primitives.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shardgraph::cuda::kernels {

struct loss_targets {
  std::int64_t classes = 0;          // columns [0, classes) are classes, the rest is padding
  std::int64_t ignore_index = -100;  // torch's default
};

// Row max and sum of exp(x - max) over the row's first `cols` elements.
template <class C>
__device__ void row_softmax_statistics(ref x, std::int64_t base, std::int64_t cols, C scale, C& row_max,
                                       C& sum) {
  C best = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    best = max(best, scale * load<C>(x, base + j));
  row_max = block_max(best);
  C s = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    s += exp(scale * load<C>(x, base + j) - row_max);
  sum = block_sum(s);
}

// y = softmax(x) per row of (rows, cols); with causal, row r of each (seq, seq) block keeps
// columns j <= r % seq (scaled by `scale`) and writes zeros after them.
template <class C>
__global__ void softmax_kernel(ref x, mut_ref y, std::int64_t cols, std::int64_t seq, bool causal, C scale) {
  const std::int64_t row = blockIdx.x, base = row * cols;
  const std::int64_t valid = causal ? row % seq + 1 : cols;
  C row_max, sum;
  row_softmax_statistics<C>(x, base, valid, scale, row_max, sum);
  const C inverse = C(1) / sum;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    store<C>(y, base + j, j < valid ? exp(scale * load<C>(x, base + j) - row_max) * inverse : C(0));
}

// dx = y (dy - sum(dy y)) * scale per row; with causal the columns after the diagonal are zero.
template <class C>
__global__ void softmax_grad_kernel(ref y, ref dy, mut_ref dx, std::int64_t cols, std::int64_t seq,
                                    bool causal, C scale) {
  const std::int64_t row = blockIdx.x, base = row * cols;
  const std::int64_t valid = causal ? row % seq + 1 : cols;
  C dot = 0;
  for (std::int64_t j = threadIdx.x; j < valid; j += blockDim.x)
    dot += load<C>(dy, base + j) * load<C>(y, base + j);
  dot = block_sum(dot);
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    store<C>(dx, base + j, j < valid ? load<C>(y, base + j) * (load<C>(dy, base + j) - dot) * scale : C(0));
}

// Whether a row has no loss: its target is the ignore index, or outside the classes (flagged in *bad).
__device__ __forceinline__ bool without_loss(std::int64_t target, loss_targets t) {
  return target == t.ignore_index || target < 0 || target >= t.classes;
}
// A row without a loss has loss 0; a target outside the classes (not ignored) is flagged in *bad.
template <class C>
__device__ bool row_without_loss(std::int64_t target, loss_targets t, C* loss, int* bad) {
  if (!without_loss(target, t)) return false;
  if (threadIdx.x == 0) {
    *loss = 0;
    if (target != t.ignore_index) *bad = 1;
  }
  return true;
}

// The padding columns [classes, ...) of vector w (lanes<T> columns from w * lanes<T>) set to -inf,
// so that they add nothing to a softmax and get a zero gradient. Only a row's last vectors hold any.
template <class T, class C>
__device__ __forceinline__ void mask_padding(C (&v)[lanes<T>], std::int64_t w, std::int64_t classes) {
  if ((w + 1) * lanes<T> <= classes) return;
  for (int j = 0; j < lanes<T>; ++j)
    if (w * lanes<T> + j >= classes) v[j] = -INFINITY;
}

// losses[row] = logsumexp(logits[row][0:classes]) - logits[row][target], 0 for a row without a loss.
// A target outside the classes sets *bad (the backend reports it at its next synchronisation).
template <class C>
__global__ void cross_entropy_rows_kernel(ref logits, ref targets, C* losses, std::int64_t vocab, loss_targets t,
                                          int* bad) {
  const std::int64_t row = blockIdx.x, base = row * vocab;
  const std::int64_t target = load_id(targets, row);
  if (row_without_loss(target, t, losses + row, bad)) return;
  C row_max, sum;
  row_softmax_statistics<C>(logits, base, t.classes, C(1), row_max, sum);
  if (threadIdx.x == 0) losses[row] = row_max + log(sum) - load<C>(logits, base + target);
}

// out[0] = sum of losses / divisor, summed by one block in a fixed order.
template <class C>
__global__ void sum_rows_kernel(const C* losses, std::int64_t rows, C divisor, mut_ref out) {
  C s = 0;
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) s += losses[i];
  s = block_sum(s);
  if (threadIdx.x == 0) store<C>(out, 0, s / divisor);
}

// The loss's gradient as a scalar: loss_gradient[0], or 1 where it has no data (the gradient a
// loss's call writes with it, kernel_call::logits_grad).
template <class C>
__device__ C loss_gradient_or_one(ref loss_gradient) {
  return loss_gradient.data != nullptr ? load<C>(loss_gradient, 0) : C(1);
}

// dlogits = (softmax over the classes - onehot(target)) * loss_gradient[0] / divisor; zero rows
// without a loss and zero padding columns. dlogits may be logits (in place): each element is read
// before it is written, by its thread.
template <class C>
__global__ void cross_entropy_grad_kernel(ref logits, ref targets, ref loss_gradient, mut_ref dlogits,
                                          std::int64_t vocab, loss_targets t, C divisor, int* bad) {
  const std::int64_t row = blockIdx.x, base = row * vocab;
  const std::int64_t target = load_id(targets, row);
  if (without_loss(target, t)) {
    if (threadIdx.x == 0 && target != t.ignore_index) *bad = 1;
    for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) store<C>(dlogits, base + j, C(0));
    return;
  }
  const C scale = loss_gradient_or_one<C>(loss_gradient) / divisor;
  C row_max, sum;
  row_softmax_statistics<C>(logits, base, t.classes, C(1), row_max, sum);
  const C inverse = C(1) / sum;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const C p = j < t.classes ? exp(load<C>(logits, base + j) - row_max) * inverse : C(0);
    store<C>(dlogits, base + j, (p - (j == target ? C(1) : C(0))) * scale);
  }
}

// ---- rows of whole 16-byte vectors (vocab a multiple of lanes<T>, 16-byte aligned) ---------------
// One read of the row's classes for its statistics: each thread keeps a running max and a sum of
// exp(x - max) rescaled as the max grows (the online softmax), merged across the block at the end.
// Only vectors holding a class are read, so each holds a finite value and the max stays finite.
template <class T, class C>
__device__ void row_softmax_statistics_vector(const T* row, std::int64_t classes, C& row_max, C& sum) {
  const std::int64_t vectors = (classes + lanes<T> - 1) / lanes<T>;
  C m = -INFINITY, s = 0;
  for (std::int64_t w = threadIdx.x; w < vectors; w += blockDim.x) {
    C v[lanes<T>];
    load_vector(row + w * lanes<T>, v);
    mask_padding<T, C>(v, w, classes);
    C next = m;
    for (int j = 0; j < lanes<T>; ++j) next = max(next, v[j]);
    C added = 0;
    for (int j = 0; j < lanes<T>; ++j) added += exp(v[j] - next);
    s = (m == -INFINITY ? C(0) : s * exp(m - next)) + added;
    m = next;
  }
  row_max = block_max(m);
  sum = block_sum(m == -INFINITY ? C(0) : s * exp(m - row_max));
}

// lse (nullable): each row's log-sum-exp, kept for the gradient (rows without a loss: not written).
template <class T, class C>
__global__ void cross_entropy_rows_vector_kernel(const T* logits, ref targets, C* losses, std::int64_t vocab,
                                                 loss_targets t, int* bad, C* lse) {
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  const std::int64_t target = load_id(targets, row);
  if (row_without_loss(target, t, losses + row, bad)) return;
  C row_max, sum;
  row_softmax_statistics_vector<T, C>(x, t.classes, row_max, sum);
  if (threadIdx.x != 0) return;
  const C log_sum_exp = row_max + log(sum);
  losses[row] = log_sum_exp - widen<T, C>(x[target]);
  if (lse != nullptr) lse[row] = log_sum_exp;
}

// lse (nullable): the rows' log-sum-exp the loss's kernel kept, read instead of a pass over the row.
template <class T, class C>
__global__ void cross_entropy_grad_vector_kernel(const T* logits, ref targets, ref loss_gradient, T* dlogits,
                                                 std::int64_t vocab, loss_targets t, C divisor, int* bad,
                                                 const C* lse) {
  const std::int64_t row = blockIdx.x, vectors = vocab / lanes<T>;
  const T* x = logits + row * vocab;
  T* dx = dlogits + row * vocab;
  const std::int64_t target = load_id(targets, row);
  const bool ignored = without_loss(target, t);
  if (ignored && threadIdx.x == 0 && target != t.ignore_index) *bad = 1;
  C row_max = 0, inverse = 0;  // p = exp(x - row_max) * inverse
  if (!ignored && lse != nullptr) {
    row_max = lse[row];
    inverse = 1;
  } else if (!ignored) {
    C sum;
    row_softmax_statistics_vector<T, C>(x, t.classes, row_max, sum);
    inverse = C(1) / sum;
  }
  const C scale = ignored ? C(0) : loss_gradient_or_one<C>(loss_gradient) / divisor;
  for (std::int64_t w = threadIdx.x; w < vectors; w += blockDim.x) {
    C v[lanes<T>];
    if (ignored) {
      for (int j = 0; j < lanes<T>; ++j) v[j] = 0;
    } else {
      load_vector(x + w * lanes<T>, v);
      mask_padding<T, C>(v, w, t.classes);  // exp(-inf) = 0: no gradient
      for (int j = 0; j < lanes<T>; ++j) {
        const C p = exp(v[j] - row_max) * inverse;
        v[j] = (p - (w * lanes<T> + j == target ? C(1) : C(0))) * scale;
      }
    }
    store_vector(dx + w * lanes<T>, v);
  }
}

// ---- the loss and the logits' gradient in one kernel (kernel_call::logits_grad) ------------------
// losses[row] as cross_entropy_rows_vector_kernel writes it, and dlogits as
// cross_entropy_grad_vector_kernel writes it for a loss gradient of 1, from one read of the row in
// memory. The exponentials are ex2.approx of (x - shift) log2(e) in f32 (relative error under
// 2^-21, far below a bf16 gradient's rounding): at GPT-2's rows these kernels are bound by the
// exponentials, not by memory, where expf's range reduction doubles their cost.
inline constexpr unsigned loss_grad_threads = 1024;

template <class C>
__device__ __forceinline__ C exp2_fast(C x) {
  if constexpr (std::is_same_v<C, float>) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  } else {
    return exp2(x);
  }
}

// One row's loss and gradient, by the whole block, from x (the row in memory or in shared memory;
// each thread reads vectors threadIdx.x, + blockDim.x, ...): its max, the sum of exp(x - max), then
// p - onehot(target) scaled. The padding columns [classes, ...) read as -inf: they add nothing to the
// sums (the block's max is a class's, finite) and get exp2(-inf) = 0. dx may be the row's memory in global memory (in place): x is read
// through before the block's last reduction, and each element of it again by the thread writing it.
// target_logit: read by thread 0 from memory before any write to the row.
template <class T, class C>
__device__ void loss_and_gradient_of_row(const T* x, T* dx, std::int64_t vectors, std::int64_t classes,
                                         std::int64_t target, C target_logit, C scale, C* loss) {
  constexpr C log2e = C(1.4426950408889634);
  C m = -INFINITY;
  for (std::int64_t w = threadIdx.x; w < vectors; w += blockDim.x) {
    C v[lanes<T>];
    load_vector(x + w * lanes<T>, v);
    mask_padding<T, C>(v, w, classes);
    for (int j = 0; j < lanes<T>; ++j) m = max(m, v[j]);
  }
  const C row_max = block_max(m), shift = row_max * log2e;
  C s = 0;
  for (std::int64_t w = threadIdx.x; w < vectors; w += blockDim.x) {
    C v[lanes<T>];
    load_vector(x + w * lanes<T>, v);
    mask_padding<T, C>(v, w, classes);
    for (int j = 0; j < lanes<T>; ++j) s += exp2_fast(v[j] * log2e - shift);
  }
  const C log_sum_exp = row_max + log(block_sum(s)), lse_shift = log_sum_exp * log2e;
  if (threadIdx.x == 0) *loss = log_sum_exp - target_logit;
  const std::int64_t target_vector = target / lanes<T>;
  for (std::int64_t w = threadIdx.x; w < vectors; w += blockDim.x) {
    C v[lanes<T>];
    load_vector(x + w * lanes<T>, v);
    mask_padding<T, C>(v, w, classes);
    for (int j = 0; j < lanes<T>; ++j) v[j] = exp2_fast(v[j] * log2e - lse_shift) * scale;
    if (w == target_vector)  // (a constant index for each j: v stays in registers)
      for (int j = 0; j < lanes<T>; ++j)
        if (j == target % lanes<T>) v[j] -= scale;
    store_vector(dx + w * lanes<T>, v);
  }
}

// A row without a loss: loss 0 and a zero gradient; a target outside the classes is flagged.
template <class T, class C>
__device__ void row_without_gradient(std::int64_t target, std::int64_t vocab, loss_targets t, T* dx, C* loss,
                                     int* bad) {
  row_without_loss(target, t, loss, bad);
  C zeros[lanes<T>] = {};
  for (std::int64_t w = threadIdx.x; w < vocab / lanes<T>; w += blockDim.x)
    store_vector(dx + w * lanes<T>, zeros);
}

// Rows staged in shared memory: a persistent block (one an SM) walks rows blockIdx.x, + gridDim.x,
// ...; while it computes a row from one of its two shared buffers, the next row's copy into the
// other is in flight (cp.async), so each row is read from memory once and the reads do not wait on
// the reductions. Each thread copies and reads only its own vectors of a buffer, so a buffer is
// reused without a block barrier. Shared memory: loss_grad_staged_bytes (two rows).
template <class T>
constexpr std::size_t loss_grad_staged_bytes(std::int64_t vocab) {
  return 2 * static_cast<std::size_t>(vocab) * sizeof(T);
}
template <class T, class C>
__global__ void __launch_bounds__(loss_grad_threads, 1)
    cross_entropy_with_grad_staged_kernel(const T* logits, ref targets, C* losses, T* dlogits,
                                          std::int64_t rows, std::int64_t vocab, loss_targets t, C scale,
                                          int* bad) {
  extern __shared__ __align__(16) unsigned char staged_rows[];
  T* const buffers = reinterpret_cast<T*>(staged_rows);  // buffer b: [b * vocab, (b + 1) * vocab)
  const std::int64_t vectors = vocab / lanes<T>;
  const auto stage = [&](std::int64_t row, T* into) {  // this thread's vectors of `row`, in flight
    const T* x = logits + row * vocab;
    for (std::int64_t w = threadIdx.x; w < vectors; w += blockDim.x)
      __pipeline_memcpy_async(into + w * lanes<T>, x + w * lanes<T>, 16);
    __pipeline_commit();
  };
  int b = 0;
  if (blockIdx.x < rows) stage(blockIdx.x, buffers);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x, b ^= 1) {
    const std::int64_t next = row + gridDim.x;
    if (next < rows) stage(next, buffers + (b ^ 1) * vocab);
    T* dx = dlogits + row * vocab;
    const std::int64_t target = load_id(targets, row);
    const bool ignored = without_loss(target, t);
    const C target_logit = threadIdx.x == 0 && !ignored ? widen<T, C>(logits[row * vocab + target]) : C(0);
    // This row's copy has landed (also for a row without a loss: its buffer is staged into next).
    next < rows ? __pipeline_wait_prior(1) : __pipeline_wait_prior(0);
    if (ignored) {
      row_without_gradient<T, C>(target, vocab, t, dx, losses + row, bad);
      continue;
    }
    loss_and_gradient_of_row<T, C>(buffers + b * vocab, dx, vectors, t.classes, target, target_logit, scale,
                                   losses + row);
  }
  __pipeline_wait_prior(0);
}

// Rows too long for two in shared memory: a block of loss_grad_threads a row, two resident an SM,
// reading the row from memory once and again from L2 (the rows in flight take a few MB).
template <class T, class C>
__global__ void __launch_bounds__(loss_grad_threads, 2)
    cross_entropy_with_grad_vector_kernel(const T* logits, ref targets, C* losses, T* dlogits,
                                          std::int64_t vocab, loss_targets t, C scale, int* bad) {
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  T* dx = dlogits + row * vocab;
  const std::int64_t target = load_id(targets, row);
  if (without_loss(target, t)) return row_without_gradient<T, C>(target, vocab, t, dx, losses + row, bad);
  const C target_logit = threadIdx.x == 0 ? widen<T, C>(x[target]) : C(0);
  loss_and_gradient_of_row<T, C>(x, dx, vocab / lanes<T>, t.classes, target, target_logit, scale, losses + row);
}

}  // namespace shardgraph::cuda::kernels
