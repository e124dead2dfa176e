#pragma once
// Token and position embeddings and the token table's gradient. Vocab-parallel as the cpu
// backend's (cpu/embedding.hpp): this rank holds table rows [row_offset, row_offset + table_rows);
// other ids give zero rows and no gradient.
#include <shardgraph/cuda/kernels/element_access.cuh>
#include <shardgraph/cuda/kernels/vectorized.cuh>

#include <cuda_runtime.h>

#include <cstdint>

namespace shardgraph::cuda::kernels {

// out (n, cols): row i = table[ids[i] - row_offset], or zeros.
template <class C, class I>
__global__ void embedding_kernel(ref ids, ref table, mut_ref out, std::int64_t n, std::int64_t table_rows,
                                 std::int64_t cols, std::int64_t row_offset) {
  for (I e = global_thread<I>(); e < static_cast<I>(n * cols); e += grid_threads<I>()) {
    const I i = e / static_cast<I>(cols), j = e % static_cast<I>(cols);
    const std::int64_t row = load_id(ids, i) - row_offset;
    store<C>(out, e, row >= 0 && row < table_rows ? load<C>(table, row * cols + j) : C(0));
  }
}

// A generation program's positions (compute/kv_context.hpp): token t of row b at
// context[b][0] - seq + t, in a table of `rows` positions; a position outside it gives NaN.
struct context_positions {
  const std::int32_t* context = nullptr;  // null: token t at position t
  std::int64_t width = 0, rows = 0;
};

// out (batch, seq, cols) = x + table[t], or table[p] at a generation program's positions
template <class C, class I>
__global__ void position_embedding_kernel(ref x, ref table, mut_ref out, std::int64_t seq, std::int64_t cols,
                                          std::int64_t numel, context_positions positions = {}) {
  for (I e = global_thread<I>(); e < static_cast<I>(numel); e += grid_threads<I>()) {
    const I t = (e / static_cast<I>(cols)) % static_cast<I>(seq), j = e % static_cast<I>(cols);
    if (positions.context == nullptr) {
      store<C>(out, e, load<C>(x, e) + load<C>(table, t * cols + j));
      continue;
    }
    const I b = e / (static_cast<I>(cols) * static_cast<I>(seq));
    const std::int64_t p = positions.context[b * static_cast<I>(positions.width)] - seq + t;
    store<C>(out, e, p >= 0 && p < positions.rows ? load<C>(x, e) + load<C>(table, p * cols + j) : C(NAN));
  }
}

// ---- rows of whole 16-byte vectors (cols a multiple of lanes<T>, every buffer 16-byte aligned) ---
// The same two ops a vector at a time: a row's vectors are copied (or added) whole, and the index
// arithmetic runs once a vector instead of once an element.
template <class T, class I>
__global__ void embedding_vector_kernel(ref ids, const T* table, T* out, std::int64_t n,
                                        std::int64_t table_rows, std::int64_t cols, std::int64_t row_offset) {
  const I vectors = static_cast<I>(cols / lanes<T>);
  for (I e = global_thread<I>(); e < static_cast<I>(n) * vectors; e += grid_threads<I>()) {
    const I i = e / vectors, v = e % vectors;
    const std::int64_t row = load_id(ids, i) - row_offset;
    uint4 bits{};  // zeros: an id outside this rank's rows
    if (row >= 0 && row < table_rows)
      bits = *reinterpret_cast<const uint4*>(table + row * cols + v * lanes<T>);
    *reinterpret_cast<uint4*>(out + static_cast<std::int64_t>(i) * cols + v * lanes<T>) = bits;
  }
}
template <class T, class C, class I>
__global__ void position_embedding_vector_kernel(const T* x, const T* table, T* out, std::int64_t seq,
                                                 std::int64_t cols, std::int64_t numel) {
  const I vectors = static_cast<I>(cols / lanes<T>);
  for (I e = global_thread<I>(); e < static_cast<I>(numel / lanes<T>); e += grid_threads<I>()) {
    const I t = (e / vectors) % static_cast<I>(seq), v = e % vectors;
    C a[lanes<T>], b[lanes<T>];
    load_vector(x + static_cast<std::int64_t>(e) * lanes<T>, a);
    load_vector(table + static_cast<std::int64_t>(t) * cols + v * lanes<T>, b);
    for (int j = 0; j < lanes<T>; ++j) a[j] += b[j];
    store_vector(out + static_cast<std::int64_t>(e) * lanes<T>, a);
  }
}

// The position table's gradient over 16-byte vectors: rows t < seq of dtable (seq * cols values,
// n) = the sum over the batch of dy (batch, seq, cols), each vector summed in batch order in C
// and written once (one pass: no partial sums, no second kernel).
template <class T, class C, class I>
__global__ void position_embedding_grad_vector_kernel(const T* dy, T* dtable, std::int64_t batch,
                                                      std::int64_t n) {
  for (I e = global_thread<I>(); e < static_cast<I>(n / lanes<T>); e += grid_threads<I>()) {
    C sum[lanes<T>] = {};
    for (std::int64_t b = 0; b < batch; ++b) {
      C x[lanes<T>];
      load_vector(dy + b * n + static_cast<std::int64_t>(e) * lanes<T>, x);
      for (int j = 0; j < lanes<T>; ++j) sum[j] += x[j];
    }
    store_vector(dtable + static_cast<std::int64_t>(e) * lanes<T>, sum);
  }
}

// ---- the table's gradient, summed in token order (no atomics: the same bits every run) ------------
// dtable row r = the sum of dout's rows at the tokens whose id is row_offset + r, in token order,
// as the cpu backend adds them. The tokens are sorted by row (a stable radix sort, so each row's
// tokens stay in order: the backend's embedding_grad), each row's range in the sorted order is
// marked, and a warp writes each table row once (zeros where no token has it).

// keys[i] = token i's table row (its id - row_offset), or table_rows where the id lies outside;
// order[i] = i, the values the sort carries.
template <class I>
__global__ void embedding_rows_of_tokens_kernel(ref ids, unsigned* keys, unsigned* order, std::int64_t n,
                                                std::int64_t table_rows, std::int64_t row_offset) {
  for (I i = global_thread<I>(); i < static_cast<I>(n); i += grid_threads<I>()) {
    const std::int64_t row = load_id(ids, i) - row_offset;
    keys[i] = static_cast<unsigned>(row >= 0 && row < table_rows ? row : table_rows);
    order[i] = static_cast<unsigned>(i);
  }
}

// [begin[r], end[r]): row r's positions in the sorted keys; both zeroed first (an empty range).
template <class I>
__global__ void embedding_row_ranges_kernel(const unsigned* sorted, std::int64_t n, std::int64_t table_rows,
                                            unsigned* begin, unsigned* end) {
  for (I k = global_thread<I>(); k < static_cast<I>(n); k += grid_threads<I>()) {
    const unsigned row = sorted[k];
    if (row >= table_rows) continue;
    if (k == 0 || sorted[k - 1] != row) begin[row] = static_cast<unsigned>(k);
    if (k + 1 == static_cast<I>(n) || sorted[k + 1] != row) end[row] = static_cast<unsigned>(k + 1);
  }
}

// dtable (table_rows, cols): a warp a row, each lane a column at a time, summing in C over the
// row's tokens in order and rounding once. With an addend (data non-null: a tied table's other
// gradient, (table_rows, cols)), its row is added to the rounded sum and rounded again: the bits of
// the gradient and then an add apart.
template <class C>
__global__ void embedding_grad_rows_kernel(ref dout, const unsigned* order, const unsigned* begin,
                                           const unsigned* end, ref addend, mut_ref dtable,
                                           std::int64_t table_rows, std::int64_t cols) {
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (std::int64_t r = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       r < table_rows; r += warps) {
    const unsigned first = begin[r], last = end[r];
    for (std::int64_t j = lane; j < cols; j += 32) {
      C sum = 0;
      for (unsigned k = first; k < last; ++k)
        sum += load<C>(dout, static_cast<std::int64_t>(order[k]) * cols + j);
      if (addend.data != nullptr) {
        store<C>(dtable, r * cols + j, sum);  // rounded as the gradient apart
        sum = load<C>(dtable, r * cols + j) + load<C>(addend, r * cols + j);
      }
      store<C>(dtable, r * cols + j, sum);
    }
  }
}

// The same a 16-byte vector at a time (cols a multiple of lanes<T>, rows 16-byte aligned): each
// lane sums whole vectors of the row's tokens, element by element in token order as above (and
// adds the addend's, null: none), and writes each once (the scalar kernel's 2-byte stores left
// the write at a quarter of HBM's rate).
template <class T, class C>
__global__ void embedding_grad_rows_vector_kernel(const T* dout, const unsigned* order, const unsigned* begin,
                                                  const unsigned* end, const T* addend, T* dtable,
                                                  std::int64_t table_rows, std::int64_t cols) {
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  const std::int64_t vectors = cols / lanes<T>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (std::int64_t r = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       r < table_rows; r += warps) {
    const unsigned first = begin[r], last = end[r];
    for (std::int64_t v = lane; v < vectors; v += 32) {
      C sum[lanes<T>] = {};
      for (unsigned k = first; k < last; ++k) {
        C x[lanes<T>];
        load_vector(dout + static_cast<std::int64_t>(order[k]) * cols + v * lanes<T>, x);
        for (int j = 0; j < lanes<T>; ++j) sum[j] += x[j];
      }
      if (addend != nullptr) {  // the rounded sum plus the addend, rounded: as apart
        C a[lanes<T>];
        load_vector(addend + r * cols + v * lanes<T>, a);
        for (int j = 0; j < lanes<T>; ++j) sum[j] = widen<T, C>(narrow<T, C>(sum[j])) + a[j];
      }
      store_vector(dtable + r * cols + v * lanes<T>, sum);
    }
  }
}

}  // namespace shardgraph::cuda::kernels
