#pragma once
// Row kernels over the last dimension: LayerNorm and RMSNorm forward and the gradient with respect
// to x (one block per row), and column sums (the gradients of biases, of the norms' weights and of
// the position table), reduced in a fixed order so that a step's results do not vary run to run.
// The formulas are the cpu backend's (cpu/norms.hpp, cpu/backward/norms_backward.hpp).
#include <shardgraph/cuda/kernels/element_access.cuh>

#include <cuda_runtime.h>

#include <cstdint>

namespace shardgraph::cuda::kernels {

inline constexpr unsigned row_threads = 256;

// The row's mean and 1/sqrt(var + eps) (two passes, as the cpu backend).
template <class C>
__device__ void layer_norm_statistics(ref x, std::int64_t row, std::int64_t cols, double eps, C& mean,
                                      C& inverse_std) {
  C sum = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += load<C>(x, row * cols + j);
  mean = block_sum(sum) / C(cols);
  C squares = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const C d = load<C>(x, row * cols + j) - mean;
    squares += d * d;
  }
  inverse_std = C(1) / sqrt(block_sum(squares) / C(cols) + C(eps));
}

template <class C>
__device__ C rms_norm_inverse(ref x, std::int64_t row, std::int64_t cols, double eps) {
  C squares = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const C v = load<C>(x, row * cols + j);
    squares += v * v;
  }
  return C(1) / sqrt(block_sum(squares) / C(cols) + C(eps));
}

template <class C>
__global__ void layer_norm_kernel(ref x, ref w, ref b, mut_ref y, std::int64_t cols, double eps) {
  const std::int64_t row = blockIdx.x;
  C mean, inverse_std;
  layer_norm_statistics<C>(x, row, cols, eps, mean, inverse_std);
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    store<C>(y, row * cols + j,
             (load<C>(x, row * cols + j) - mean) * inverse_std * load<C>(w, j) + load<C>(b, j));
}

template <class C>
__global__ void rms_norm_kernel(ref x, ref w, mut_ref y, std::int64_t cols, double eps) {
  const std::int64_t row = blockIdx.x;
  const C inverse = rms_norm_inverse<C>(x, row, cols, eps);
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    store<C>(y, row * cols + j, load<C>(w, j) * (load<C>(x, row * cols + j) * inverse));
}

// dx = (dy w - mean(dy w) - xhat mean(dy w xhat)) / sqrt(var + eps)
template <class C>
__global__ void layer_norm_grad_x_kernel(ref x, ref w, ref dy, mut_ref dx, std::int64_t cols, double eps) {
  const std::int64_t row = blockIdx.x;
  C mean, inverse_std;
  layer_norm_statistics<C>(x, row, cols, eps, mean, inverse_std);
  C g_sum = 0, gx_sum = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const std::int64_t at = row * cols + j;
    const C g = load<C>(dy, at) * load<C>(w, j);
    g_sum += g;
    gx_sum += g * (load<C>(x, at) - mean) * inverse_std;
  }
  const C g_mean = block_sum(g_sum) / C(cols), gx_mean = block_sum(gx_sum) / C(cols);
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const std::int64_t at = row * cols + j;
    const C xhat = (load<C>(x, at) - mean) * inverse_std;
    store<C>(dx, at, (load<C>(dy, at) * load<C>(w, j) - g_mean - xhat * gx_mean) * inverse_std);
  }
}

// dx = r (dy w - x r^2 mean(dy w x)),  r = 1 / sqrt(mean(x^2) + eps)
template <class C>
__global__ void rms_norm_grad_x_kernel(ref x, ref w, ref dy, mut_ref dx, std::int64_t cols, double eps) {
  const std::int64_t row = blockIdx.x;
  const C r = rms_norm_inverse<C>(x, row, cols, eps);
  C gx_sum = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const std::int64_t at = row * cols + j;
    gx_sum += load<C>(dy, at) * load<C>(w, j) * load<C>(x, at);
  }
  const C correction = block_sum(gx_sum) / C(cols) * r * r;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const std::int64_t at = row * cols + j;
    store<C>(dx, at, r * (load<C>(dy, at) * load<C>(w, j) - load<C>(x, at) * correction));
  }
}

// Per row: (mean, 1/std) for layer_norm, (0, 1/rms) for rms_norm, into stats (rows, 2).
template <class C, bool Layer>
__global__ void norm_statistics_kernel(ref x, C* stats, std::int64_t cols, double eps) {
  const std::int64_t row = blockIdx.x;
  C mean = 0, inverse;
  if constexpr (Layer)
    layer_norm_statistics<C>(x, row, cols, eps, mean, inverse);
  else
    inverse = rms_norm_inverse<C>(x, row, cols, eps);
  if (threadIdx.x == 0) {
    stats[2 * row] = mean;
    stats[2 * row + 1] = inverse;
  }
}

// What a column sum adds up, element (i, j) of a (rows, n) matrix.
enum class column_term { value, normalized_product };  // dy; or dy (x - mean) / std, per row's stats

template <class C, column_term Term>
struct column_source {
  static constexpr column_term term = Term;
  ref dy, x;
  const C* stats = nullptr;  // (rows, 2) for normalized_product
  __device__ C operator()(std::int64_t i, std::int64_t j, std::int64_t n) const {
    const C g = load<C>(dy, i * n + j);
    if constexpr (Term == column_term::value)
      return g;
    else
      return g * (load<C>(x, i * n + j) - stats[2 * i]) * stats[2 * i + 1];
  }
};

inline constexpr unsigned column_block_x = 32, column_block_y = 8;
inline constexpr std::int64_t column_rows_per_split = 128;

// partial (splits, n): split s sums rows [s * per, (s+1) * per) of each column.
template <class C, class Source>
__global__ void column_partial_kernel(Source source, C* partial, std::int64_t rows, std::int64_t n) {
  __shared__ C sums[column_block_y][column_block_x];
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * column_block_x + threadIdx.x;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * column_rows_per_split;
  const std::int64_t end = min(rows, begin + column_rows_per_split);
  C sum = 0;
  if (j < n)
    for (std::int64_t i = begin + threadIdx.y; i < end; i += column_block_y) sum += source(i, j, n);
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    C total = 0;
    for (unsigned y = 0; y < column_block_y; ++y) total += sums[y][threadIdx.x];
    partial[blockIdx.y * n + j] = total;
  }
}

// out[j] = sum over the splits of partial[s][j]; blocks of (column_block_x, column_block_y), grid
// (ceil(n / column_block_x)): thread (x, y) adds splits y, y + column_block_y, ... of its column,
// then row y = 0 adds the column_block_y sums in order (the same order on every run).
template <class C>
__global__ void column_total_kernel(const C* partial, std::int64_t splits, mut_ref out, std::int64_t n) {
  __shared__ C sums[column_block_y][column_block_x];
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * column_block_x + threadIdx.x;
  C total = 0;
  if (j < n)
    for (std::int64_t s = threadIdx.y; s < splits; s += column_block_y) total += partial[s * n + j];
  sums[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y != 0 || j >= n) return;
  for (unsigned y = 1; y < column_block_y; ++y) total += sums[y][threadIdx.x];
  store<C>(out, j, total);
}

}  // namespace shardgraph::cuda::kernels
