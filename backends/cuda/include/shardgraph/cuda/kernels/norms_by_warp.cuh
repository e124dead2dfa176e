#pragma once
// LayerNorm and RMSNorm rows of up to a few thousand columns, one warp per row: the row is read
// once into registers as 16-byte vectors (Vectors of them per lane), its statistics are warp
// shuffles, and it is written once. For calls whose x, w, b, dy and y share one dtype T, start on
// 16 bytes and whose cols are whole vectors; the rest take norms.cuh's block-per-row kernels.
// Same formulas (and two-pass variance) as norms.cuh; the sums run in another order. Also the
// vector form of norms.cuh's column sums (bias and norm-weight gradients).
#include <shardgraph/cuda/kernels/norms.cuh>
#include <shardgraph/cuda/kernels/vectorized.cuh>

#include <cuda_pipeline_primitives.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace shardgraph::cuda::kernels {

inline constexpr unsigned warp_rows_per_block = 8;  // 256 threads

template <class C>
__device__ __forceinline__ C warp_sum(C v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// A row of cols = vectors * lanes<T> elements; lane l holds vectors l, l + 32, ...
template <class T, class C, int Vectors>
struct warp_row {
  C v[Vectors][lanes<T>];
  __device__ __forceinline__ void load(const T* row, int vectors) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < Vectors; ++k)
      if (lane + 32 * k < vectors) load_vector(row + (lane + 32 * k) * lanes<T>, v[k]);
  }
  __device__ __forceinline__ void multiply(const warp_row& other, int vectors) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < Vectors; ++k)
      if (lane + 32 * k < vectors)
#pragma unroll
        for (int j = 0; j < lanes<T>; ++j) v[k][j] *= other.v[k][j];
  }
  template <class F>  // f(k, j, value) for each element the lane holds
  __device__ __forceinline__ void each(int vectors, F&& f) const {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < Vectors; ++k)
      if (lane + 32 * k < vectors)
#pragma unroll
        for (int j = 0; j < lanes<T>; ++j) f(k, j, v[k][j]);
  }
};

template <class T, class C, int Vectors>
__device__ __forceinline__ void warp_layer_norm_statistics(const warp_row<T, C, Vectors>& x, int vectors,
                                                           int cols, double eps, C& mean, C& inverse_std) {
  C sum = 0;
  x.each(vectors, [&](int, int, C value) { sum += value; });
  mean = warp_sum(sum) / C(cols);
  C squares = 0;
  x.each(vectors, [&](int, int, C value) { squares += (value - mean) * (value - mean); });
  inverse_std = C(1) / sqrt(warp_sum(squares) / C(cols) + C(eps));
}

template <class T, class C, int Vectors>
__device__ __forceinline__ C warp_rms_inverse(const warp_row<T, C, Vectors>& x, int vectors, int cols,
                                              double eps) {
  C squares = 0;
  x.each(vectors, [&](int, int, C value) { squares += value * value; });
  return C(1) / sqrt(warp_sum(squares) / C(cols) + C(eps));
}

// (mean, 1/std) for layer norm, (0, 1/rms) for rms norm.
template <bool Layer, class T, class C, int Vectors>
__device__ __forceinline__ void warp_norm_statistics(const warp_row<T, C, Vectors>& x, int vectors, int cols,
                                                     double eps, C& mean, C& inverse) {
  if constexpr (Layer)
    warp_layer_norm_statistics(x, vectors, cols, eps, mean, inverse);
  else
    inverse = warp_rms_inverse(x, vectors, cols, eps);
}

// Writes f(k, j) for each element the lane holds, as vectors of row, plus addend's row when given.
template <class T, class C, int Vectors, class F>
__device__ __forceinline__ void store_row(T* row, int vectors, F&& f, const T* addend = nullptr) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < Vectors; ++k) {
    const int vec = lane + 32 * k;
    if (vec >= vectors) continue;
    C out[lanes<T>];
#pragma unroll
    for (int j = 0; j < lanes<T>; ++j) out[j] = f(k, j, vec * lanes<T> + j);
    if (addend != nullptr) {
      C a[lanes<T>];
      load_vector(addend + vec * lanes<T>, a);
#pragma unroll
      for (int j = 0; j < lanes<T>; ++j) out[j] += a[j];
    }
    store_vector(row + vec * lanes<T>, out);
  }
}

__device__ __forceinline__ std::int64_t warp_row_index() {
  return static_cast<std::int64_t>(blockIdx.x) * warp_rows_per_block + threadIdx.x / 32;
}

// y = (x - mean) / std * w + b (layer norm), or w * x / rms (b null: rms norm).
template <class T, class C, int Vectors, bool Layer>
__global__ void norm_warp_kernel(const T* x, const T* w, const T* b, T* y, std::int64_t rows, int cols,
                                 double eps) {
  const std::int64_t row = warp_row_index();
  if (row >= rows) return;
  const int vectors = cols / lanes<T>;
  warp_row<T, C, Vectors> xr;
  xr.load(x + row * cols, vectors);
  C mean = 0, inverse = 0;
  warp_norm_statistics<Layer>(xr, vectors, cols, eps, mean, inverse);
  // w's and b's vectors are read as each output vector is made (from L1), not held, which keeps
  // the registers a thread needs at 4 vectors a lane low (bench/RESULTS.md).
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < Vectors; ++k) {
    const int vec = lane + 32 * k;
    if (vec >= vectors) continue;
    C weights[lanes<T>], biases[lanes<T>], out[lanes<T>];
    load_vector(w + vec * lanes<T>, weights);
    if constexpr (Layer) load_vector(b + vec * lanes<T>, biases);
#pragma unroll
    for (int j = 0; j < lanes<T>; ++j) {
      if constexpr (Layer)
        out[j] = (xr.v[k][j] - mean) * inverse * weights[j] + biases[j];
      else
        out[j] = weights[j] * (xr.v[k][j] * inverse);
    }
    store_vector(y + row * cols + vec * lanes<T>, out);
  }
}

// layer norm: dx = (g - mean(g) - xhat mean(g xhat)) / std,  xhat = (x - mean) / std
// rms norm:   dx = (g - xhat mean(g xhat)) / rms,            xhat = x / rms
// with g = dy w (in g already) and `inverse` = 1 / std or 1 / rms (mean 0 for rms); written to
// dx_row, plus addend_row's values when given (the residual stream's gradient, nullable).
template <bool Layer, class T, class C, int Vectors>
__device__ __forceinline__ void store_norm_input_gradient(const warp_row<T, C, Vectors>& x,
                                                          const warp_row<T, C, Vectors>& g, C mean, C inverse,
                                                          T* dx_row, const T* addend_row, int vectors,
                                                          int cols) {
  C g_sum = 0, gx_sum = 0;
  g.each(vectors, [&](int k, int j, C value) {
    g_sum += value;
    gx_sum += value * (x.v[k][j] - mean) * inverse;
  });
  const C g_mean = Layer ? warp_sum(g_sum) / C(cols) : C(0), gx_mean = warp_sum(gx_sum) / C(cols);
  store_row<T, C, Vectors>(
      dx_row, vectors,
      [&](int k, int j, int) {
        return (g.v[k][j] - g_mean - (x.v[k][j] - mean) * inverse * gx_mean) * inverse;
      },
      addend_row);
}

// The input gradient of a layer or rms norm (store_norm_input_gradient), a warp per row.
template <class T, class C, int Vectors, bool Layer>
__global__ void norm_grad_x_warp_kernel(const T* x, const T* w, const T* dy, const T* addend, T* dx,
                                        std::int64_t rows, int cols, double eps) {
  const std::int64_t row = warp_row_index();
  if (row >= rows) return;
  const int vectors = cols / lanes<T>;
  warp_row<T, C, Vectors> xr, gr, wr;
  xr.load(x + row * cols, vectors);
  gr.load(dy + row * cols, vectors);
  wr.load(w, vectors);
  C mean = 0, inverse = 0;
  warp_norm_statistics<Layer>(xr, vectors, cols, eps, mean, inverse);
  gr.multiply(wr, vectors);  // g = dy w
  store_norm_input_gradient<Layer>(xr, gr, mean, inverse, dx + row * cols,
                                   addend != nullptr ? addend + row * cols : nullptr, vectors, cols);
}

// A norm's three gradients in one pass over x and dy: dx as norm_grad_x_warp_kernel, and the
// weight gradient's column sums dy * xhat (xhat = (x - mean) / std, or x / rms), with Bias also
// the bias gradient's, dy. Each warp takes rows warp, warp + warps, ... (warps: the grid's, one
// wave of blocks) and sums its columns; the block's 8 warps' sums are then added in order into
// partial (gridDim.x, cols) and, with Bias, partial + gridDim.x * cols: the splits
// column_total_kernel adds up. w's vectors are read again for each row (from L1), not held.
// Rows of up to 3 vectors a lane (768 bf16 columns) keep each lane's column sums in registers
// (24 + 24 beside the row's x and g: 128 registers at 768 bf16 wide, no spills, two blocks an
// SM); wider rows add into the warp's own row of shared memory instead, a read-modify-write per
// element and row. The shared sums are element-major (element j of vector i at
// j * Vectors * 32 + i): a warp's lanes touch consecutive words.
// While a warp computes a row, its next row's x and dy (and the addend's, in the other of two
// slots) are in flight into shared memory (cp.async, staged once the row's own x and dy are summed
// from registers): each lane copies and reads back only its own vectors, so no barrier is needed.
// Without it every row waits on memory twice with little else to run (two blocks of 8 warps an
// SM).
// Dynamic shared memory: norm_gradients_shared_bytes (the sums and 4 row slots a warp; with the
// sums in registers, the slots' bytes hold the sums at the end).
inline constexpr int gradient_vectors_per_lane = 4;  // the widest row: 4 x 32 vectors
template <int Vectors>
inline constexpr bool gradient_sums_in_registers = Vectors <= 3;
template <class T, class C, int Vectors, bool Bias>
constexpr std::size_t norm_gradient_sums_bytes = std::size_t{Bias ? 2u : 1u} * warp_rows_per_block* Vectors *
                                                 32 * lanes<T> * sizeof(C);
template <class T, class C, int Vectors>
constexpr std::size_t norm_gradient_slots_bytes = std::size_t{4} * warp_rows_per_block* Vectors * 32 *
                                                  lanes<T> * sizeof(T);
template <class T, class C, int Vectors, bool Bias>
constexpr std::size_t norm_gradients_shared_bytes =
    gradient_sums_in_registers<Vectors>
        ? std::max(norm_gradient_sums_bytes<T, C, Vectors, Bias>, norm_gradient_slots_bytes<T, C, Vectors>)
        : norm_gradient_sums_bytes<T, C, Vectors, Bias> + norm_gradient_slots_bytes<T, C, Vectors>;
// partial[total][blockIdx.x][c] = the sum, in warp order, of the block's warps' column sums
// sums[total][warp][(c % L) * Vectors * 32 + c / L] (element-major rows of Width), for each of
// Totals sums (the weight gradient's; with a bias, the bias gradient's).
template <class T, class C, int Vectors, int Totals>
__device__ __forceinline__ void write_block_partials(const C* sums, C* partial, int cols) {
  constexpr int L = lanes<T>, Width = Vectors * 32 * L;
  for (int total = 0; total < Totals; ++total)
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const int from = (c % L) * Vectors * 32 + c / L;
      C block_sum = 0;
      for (unsigned v = 0; v < warp_rows_per_block; ++v)
        block_sum += sums[(total * warp_rows_per_block + v) * Width + from];
      partial[(static_cast<std::int64_t>(total) * gridDim.x + blockIdx.x) * cols + c] = block_sum;
    }
}

template <class T, class C, int Vectors, bool Layer, bool Bias>
__global__ void __launch_bounds__(256, 2)
    norm_gradients_warp_kernel(const T* x, const T* w, const T* dy, const T* addend, T* dx, C* partial,
                               std::int64_t rows, int cols, double eps) {
  constexpr int L = lanes<T>, Width = Vectors * 32 * L, Totals = Bias ? 2 : 1;
  constexpr bool InRegisters = gradient_sums_in_registers<Vectors>;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  C* sums = reinterpret_cast<C*>(shared_bytes);  // [Totals][warp_rows_per_block][Width]
  const int vectors = cols / L, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * warp_rows_per_block;
  const auto at = [&](int k, int j) { return j * Vectors * 32 + lane + 32 * k; };
  C* own_weight_sums = sums + warp * Width;
  C* own_bias_sums = sums + (warp_rows_per_block + warp) * Width;
  // the lane's column sums, where they are held in registers
  C weight_sums[InRegisters ? Vectors : 1][L] = {}, bias_sums[InRegisters && Bias ? Vectors : 1][L] = {};
  // the warp's staged rows: x, dy, and the addend in two slots
  T* const x_row =
      reinterpret_cast<T*>(shared_bytes + (InRegisters ? 0 : norm_gradient_sums_bytes<T, C, Vectors, Bias>)) +
      warp * 4 * Width;
  T* const dy_row = x_row + Width;
  T* const addend_rows = x_row + 2 * Width;
  const auto stage = [&](std::int64_t row, int slot) {
#pragma unroll
    for (int k = 0; k < Vectors; ++k) {
      const int v = lane + 32 * k;
      if (v >= vectors) continue;
      __pipeline_memcpy_async(x_row + v * L, x + row * cols + v * L, 16);
      __pipeline_memcpy_async(dy_row + v * L, dy + row * cols + v * L, 16);
      if (addend != nullptr)
        __pipeline_memcpy_async(addend_rows + slot * Width + v * L, addend + row * cols + v * L, 16);
    }
    __pipeline_commit();
  };
  if constexpr (!InRegisters) {
    for (int i = threadIdx.x; i < Totals * static_cast<int>(warp_rows_per_block) * Width; i += blockDim.x)
      sums[i] = 0;
    __syncthreads();
  }
  std::int64_t row = warp_row_index();
  if (row < rows) stage(row, 0);
  for (int slot = 0; row < rows; row += warps, slot ^= 1) {
    __pipeline_wait_prior(0);  // this row's copies have landed
    warp_row<T, C, Vectors> xr, gr;
    xr.load(x_row, vectors);
    gr.load(dy_row, vectors);
    C mean = 0, inverse = 0;  // xhat = (x - mean) * inverse
    warp_norm_statistics<Layer>(xr, vectors, cols, eps, mean, inverse);
    gr.each(vectors, [&](int k, int j, C g) {
      const C product = g * (xr.v[k][j] - mean) * inverse;
      if constexpr (InRegisters) {
        weight_sums[k][j] += product;
        if constexpr (Bias) bias_sums[k][j] += g;
      } else {
        own_weight_sums[at(k, j)] += product;
        if constexpr (Bias) own_bias_sums[at(k, j)] += g;
      }
    });
    if (row + warps < rows) stage(row + warps, slot ^ 1);  // x and dy were read from their slots
#pragma unroll
    for (int k = 0; k < Vectors; ++k)  // g = dy w
      if (lane + 32 * k < vectors) {
        C weights[L];
        load_vector(w + (lane + 32 * k) * L, weights);
#pragma unroll
        for (int j = 0; j < L; ++j) gr.v[k][j] *= weights[j];
      }
    store_norm_input_gradient<Layer>(xr, gr, mean, inverse, dx + row * cols,
                                     addend != nullptr ? addend_rows + slot * Width : nullptr, vectors, cols);
  }
  __syncthreads();
  if constexpr (InRegisters) {  // the slots are read: their bytes take the warps' sums
#pragma unroll
    for (int k = 0; k < Vectors; ++k)
#pragma unroll
      for (int j = 0; j < L; ++j) {
        own_weight_sums[at(k, j)] = weight_sums[k][j];
        if constexpr (Bias) own_bias_sums[at(k, j)] = bias_sums[k][j];
      }
    __syncthreads();
  }
  write_block_partials<T, C, Vectors, Totals>(sums, partial, cols);
}

// stats (rows, 2): (mean, 1/std) for layer norm, (0, 1/rms) for rms norm.
template <class T, class C, int Vectors, bool Layer>
__global__ void norm_statistics_warp_kernel(const T* x, C* stats, std::int64_t rows, int cols, double eps) {
  const std::int64_t row = warp_row_index();
  if (row >= rows) return;
  const int vectors = cols / lanes<T>;
  warp_row<T, C, Vectors> xr;
  xr.load(x + row * cols, vectors);
  C mean = 0, inverse = 0;
  warp_norm_statistics<Layer>(xr, vectors, cols, eps, mean, inverse);
  if (threadIdx.x % 32 == 0) {
    stats[2 * row] = mean;
    stats[2 * row + 1] = inverse;
  }
}

// column_partial_kernel on 16-byte vectors: each thread sums lanes<T> adjacent columns, so a warp
// reads 512 contiguous bytes of a row. dy and x (normalized_product) hold T; n is whole vectors.
// With AlsoValues (normalized_product only), dy's own column sums go to partial + splits * n in the
// same pass: a layer norm's weight and bias gradients from one read of dy.
template <class T, class C, column_term Term, bool AlsoValues = false>
__global__ void column_partial_vector_kernel(const T* dy, const T* x, const C* stats, C* partial,
                                             std::int64_t rows, std::int64_t n) {
  static_assert(!AlsoValues || Term == column_term::normalized_product, "values are the term already");
  constexpr int L = lanes<T>, Sums = AlsoValues ? 2 : 1;
  __shared__ C sums[Sums][column_block_y][column_block_x * L];
  const std::int64_t first = (static_cast<std::int64_t>(blockIdx.x) * column_block_x + threadIdx.x) * L;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * column_rows_per_split;
  const std::int64_t end = min(rows, begin + column_rows_per_split);
  C acc[Sums][L] = {};
  if (first < n)
    for (std::int64_t i = begin + threadIdx.y; i < end; i += column_block_y) {
      C g[L];
      load_vector(dy + i * n + first, g);
      if constexpr (AlsoValues)
        for (int l = 0; l < L; ++l) acc[1][l] += g[l];
      if constexpr (Term == column_term::normalized_product) {
        C xv[L];
        load_vector(x + i * n + first, xv);
        const C mean = stats[2 * i], inverse = stats[2 * i + 1];
        for (int l = 0; l < L; ++l) g[l] *= (xv[l] - mean) * inverse;
      }
      for (int l = 0; l < L; ++l) acc[0][l] += g[l];
    }
  for (int k = 0; k < Sums; ++k)
    for (int l = 0; l < L; ++l) sums[k][threadIdx.y][threadIdx.x * L + l] = acc[k][l];
  __syncthreads();
  if (threadIdx.y == 0 && first < n)
    for (int k = 0; k < Sums; ++k)
      for (int l = 0; l < L; ++l) {
        C total = 0;
        for (unsigned y = 0; y < column_block_y; ++y) total += sums[k][y][threadIdx.x * L + l];
        partial[(k * gridDim.y + blockIdx.y) * n + first + l] = total;
      }
}

}  // namespace shardgraph::cuda::kernels
