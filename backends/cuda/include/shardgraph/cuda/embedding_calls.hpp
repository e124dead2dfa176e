#pragma once
// The embeddings of cuda::backend's calls and their gradients (kernels/embedding.cuh).
//
//   embedding                {tokens, table_rows, cols, row_offset}  ids, table -> (tokens, cols)
//   position_embedding       {batch, seq, cols}                      x + table[t]
//   embedding_grad           {tokens, table_rows, cols, row_offset}  ids, dout -> (table_rows, cols)
//   position_embedding_grad  {batch, seq, cols}                      dout -> the table's gradient
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/column_sums.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/embedding.cuh>
#include <shardgraph/cuda/memory_moves.hpp>
#include <shardgraph/cuda/scratch.hpp>
#include <shardgraph/cuda/tensor_buffer.hpp>
#include <shardgraph/cuda/text.hpp>

#include <cuda_runtime.h>
#include <cub/device/device_radix_sort.cuh>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shardgraph::cuda::detail {

// ids, table (table_rows, cols) -> (n, cols); rows outside the table give 0.
template <class C, class I>
void embedding(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  if (vector_ready(o.type(), d[2], {in(c, 1), in(o)}))
    return with_vector_types(o.type(), [&]<class T, class V>() {
      kernels::embedding_vector_kernel<T, I>
          <<<kernels::blocks_for(d[0] * d[2] / kernels::lanes<T>, 256), 256, 0, s.stream>>>(
              in(c, 0), typed<T>(*c.in[1]), static_cast<T*>(o.data()), d[0], d[1], d[2], d[3]);
    });
  kernels::embedding_kernel<C, I><<<kernels::blocks_for(d[0] * d[2], 256), 256, 0, s.stream>>>(
      in(c, 0), in(c, 1), out(o), d[0], d[1], d[2], d[3]);
}

// x (batch, seq, cols) + table[t]
template <class C, class I>
void position_embedding(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  if (c.in[2] != nullptr)  // a generation program's: positions from kv_context (batch, width) i32,
                           // checked against the table on the host (runtime/kv_cache.hpp)
    return kernels::position_embedding_kernel<C, I><<<kernels::blocks_for(o.numel(), 256), 256, 0, s.stream>>>(
        in(c, 0), in(c, 1), out(o), d[1], d[2], d[0] * d[1] * d[2],
        {static_cast<const std::int32_t*>(c.in[2]->data()), c.in[2]->numel() / d[0], c.in[1]->numel() / d[2]});
  if (vector_ready(o.type(), d[2], {in(c, 0), in(c, 1), in(o)}) && compute_type_is<C>(o.type()))
    return with_vector_types(o.type(), [&]<class T, class V>() {
      if constexpr (std::is_same_v<V, C>)
        kernels::position_embedding_vector_kernel<T, C, I>
            <<<kernels::blocks_for(o.numel() / kernels::lanes<T>, 256), 256, 0, s.stream>>>(
                typed<T>(*c.in[0]), typed<T>(*c.in[1]), static_cast<T*>(o.data()), d[1], d[2], o.numel());
    });
  kernels::position_embedding_kernel<C, I><<<kernels::blocks_for(o.numel(), 256), 256, 0, s.stream>>>(
      in(c, 0), in(c, 1), out(o), d[1], d[2], d[0] * d[1] * d[2]);
}

// Rows t < seq of the table: dout's sums over the batch; rows t >= seq: 0.
template <class C, class I>
void position_embedding_grad(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  const std::int64_t n = d[1] * d[2];
  if (vector_ready(o.type(), n, {in(c, 0), in(o)}) && compute_type_is<C>(o.type())) {
    const std::size_t written = static_cast<std::size_t>(n) * dtype_size(o.type());
    check_cuda(cudaMemsetAsync(static_cast<char*>(o.data()) + written, 0, o.size_bytes() - written, s.stream),
               "backend: position_embedding_grad (cudaMemsetAsync)");  // rows t >= seq
    return with_vector_types(o.type(), [&]<class T, class V>() {
      if constexpr (std::is_same_v<V, C>)
        kernels::position_embedding_grad_vector_kernel<T, C, I>
            <<<kernels::blocks_for(n / kernels::lanes<T>, 256), 256, 0, s.stream>>>(
                typed<T>(*c.in[0]), static_cast<T*>(o.data()), d[0], n);
    });
  }
  fill_zero(s, o);
  column_sums_of<C>(s, out(o), d[0], n, in(c, 0));
}

// embedding_grad's token order in scratch: each token's table row (the sort's keys), the tokens
// sorted by row, and each row's range [begin, end) in the sorted tokens.
struct token_order {
  const unsigned* sorted_tokens;
  const unsigned* begin;
  const unsigned* end;
};

// The tokens ids (n) sorted by table row with CUB's radix sort (stable: token order within a row),
// each row's range marked.
template <class I>
token_order sort_tokens_by_row(backend_state& s, kernels::ref ids, std::int64_t n, std::int64_t table_rows,
                               std::int64_t row_offset) {
  if (n > std::int64_t{1} << 31 || table_rows >= std::int64_t{1} << 31)
    fail("cuda::backend: embedding_grad",
         text(n, " tokens into ", table_rows, " rows: the token sort takes under 2^31 of each"),
         "split the batch into micro-batches, or the table over more ranks");
  int bits = 1;  // the sort's key bits: rows 0 .. table_rows (the key of ids outside the table)
  while ((std::int64_t{1} << bits) <= table_rows) ++bits;
  const int items = static_cast<int>(n);
  std::size_t sort_bytes = 0;
  check_cuda(
      cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const unsigned*>(nullptr),
                                      static_cast<unsigned*>(nullptr), static_cast<const unsigned*>(nullptr),
                                      static_cast<unsigned*>(nullptr), items, 0, bits, s.stream),
      "backend: embedding_grad (cub::DeviceRadixSort, its memory)");
  const auto aligned = [](std::int64_t count) {
    return static_cast<std::size_t>((count * 4 + 255) / 256 * 256);
  };
  const std::size_t token_bytes = aligned(n), row_bytes = aligned(table_rows);
  auto* base = static_cast<unsigned char*>(
      s.scratch.get(scratch_use::token_order, 4 * token_bytes + 2 * row_bytes + sort_bytes));
  const auto at = [&](std::size_t offset) { return reinterpret_cast<unsigned*>(base + offset); };
  unsigned *keys = at(0), *sorted = at(token_bytes), *order = at(2 * token_bytes),
           *sorted_order = at(3 * token_bytes), *begin = at(4 * token_bytes),
           *end = at(4 * token_bytes + row_bytes);
  check_cuda(cudaMemsetAsync(begin, 0, 2 * row_bytes, s.stream), "backend: embedding_grad (cudaMemsetAsync)");
  const unsigned threads = 256;
  if (n > 0) {
    kernels::embedding_rows_of_tokens_kernel<I><<<kernels::blocks_for(n, threads), threads, 0, s.stream>>>(
        ids, keys, order, n, table_rows, row_offset);
    check_cuda(cub::DeviceRadixSort::SortPairs(base + 4 * token_bytes + 2 * row_bytes, sort_bytes, keys,
                                               sorted, order, sorted_order, items, 0, bits, s.stream),
               "backend: embedding_grad (cub::DeviceRadixSort)");
    kernels::embedding_row_ranges_kernel<I>
        <<<kernels::blocks_for(n, threads), threads, 0, s.stream>>>(sorted, n, table_rows, begin, end);
  }
  return {sorted_order, begin, end};
}

// ids (in 0, n), dout (in 1, (n, cols)) -> the table's gradient (table_rows, cols), each row the
// sum of its tokens' rows in token order (kernels/embedding.cuh): the tokens sorted by row, then a
// warp writes each row once. No atomics: the same bits every run, and the cpu backend's. With the
// add epilogue, each row adds side's row (a tied table's other gradient) as it is written.
template <class C, class I>
void embedding_grad(backend_state& s, const kernel_call& c) {
  const std::int64_t n = c.dims[0], table_rows = c.dims[1], cols = c.dims[2], row_offset = c.dims[3];
  const token_order tokens = sort_tokens_by_row<I>(s, in(c, 0), n, table_rows, row_offset);
  const unsigned threads = 256;
  const dtype t = c.out->type();
  const bool adds = c.epilogue == compute::product_epilogue::add;  // + side's row (a tied table)
  if (vector_ready(t, cols, {in(c, 1), in(*c.out)}) && (!adds || vector_ready(t, cols, {in(*c.side)})) &&
      compute_type_is<C>(t))
    return with_vector_types(t, [&]<class T, class V>() {
      if constexpr (std::is_same_v<V, C>)
        kernels::embedding_grad_rows_vector_kernel<T, C>
            <<<kernels::blocks_for(table_rows * 32, threads), threads, 0, s.stream>>>(
                typed<T>(*c.in[1]), tokens.sorted_tokens, tokens.begin, tokens.end,
                adds ? typed<T>(*c.side) : nullptr, static_cast<T*>(c.out->data()), table_rows, cols);
    });
  kernels::embedding_grad_rows_kernel<C>
      <<<kernels::blocks_for(table_rows * 32, threads), threads, 0, s.stream>>>(
          in(c, 1), tokens.sorted_tokens, tokens.begin, tokens.end, adds ? in(*c.side) : kernels::ref{},
          out(*c.out), table_rows, cols);
}

}  // namespace shardgraph::cuda::detail
