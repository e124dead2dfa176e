#pragma once
// Token and position embeddings and the token table's gradient. Vocab-parallel as the cpu
// backend's (cpu/embedding.hpp): this rank holds table rows [row_offset, row_offset + table_rows);
// other ids give zero rows and no gradient.
#include <shardgraph/cuda/kernels/element_access.cuh>

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

// out (batch, seq, cols) = x + table[t]
template <class C, class I>
__global__ void position_embedding_kernel(ref x, ref table, mut_ref out, std::int64_t seq, std::int64_t cols,
                                          std::int64_t numel) {
  for (I e = global_thread<I>(); e < static_cast<I>(numel); e += grid_threads<I>()) {
    const I t = (e / static_cast<I>(cols)) % static_cast<I>(seq), j = e % static_cast<I>(cols);
    store<C>(out, e, load<C>(x, e) + load<C>(table, t * cols + j));
  }
}

// sums (table_rows, cols), zeroed first, += dout's rows at their ids. Atomic adds: the order of a
// repeated id's rows varies, so f32 sums may differ in the last bits from run to run.
template <class C, class I>
__global__ void embedding_grad_kernel(ref ids, ref dout, C* sums, std::int64_t n, std::int64_t table_rows,
                                      std::int64_t cols, std::int64_t row_offset) {
  for (I e = global_thread<I>(); e < static_cast<I>(n * cols); e += grid_threads<I>()) {
    const I i = e / static_cast<I>(cols), j = e % static_cast<I>(cols);
    const std::int64_t row = load_id(ids, i) - row_offset;
    if (row >= 0 && row < table_rows) atomicAdd(sums + row * cols + j, load<C>(dout, e));
  }
}

}  // namespace shardgraph::cuda::kernels
