#pragma once
// Gradients of the token and position embeddings with respect to their tables. Both scatter-add
// into a parameter gradient, so both accumulate (+=): zero the table gradient before the first call
// of a step. Neither embedding has a gradient with respect to the ids.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

// Vocab-parallel, as embedding(): this rank holds table rows [row_offset, row_offset + table_rows).
// dtable (table_rows, cols) += row i of dout (n, cols) at local row ids[i] - row_offset, for each i
// whose id falls in this rank's range; other ids (another rank's, or outside the vocabulary) are
// skipped. ids (n). A row repeated in ids receives the sum of its rows of dout, in id order.
// dtable must not overlap dout.
template <class T, class Id>
void embedding_backward(const Id* ids, const T* dout, T* dtable, std::int64_t n, std::int64_t table_rows,
                        std::int64_t cols, std::int64_t row_offset) {
  constexpr auto where = "cpu::embedding_backward";
  detail::check_size(where, "n", n);
  detail::check_size(where, "table_rows", table_rows);
  detail::check_size(where, "cols", cols);
  detail::check_size(where, "row_offset", row_offset);
  detail::check_pointer(where, "ids", ids, n);
  detail::check_pointer(where, "dout", dout, n * cols);
  detail::check_pointer(where, "dtable", dtable, table_rows * cols);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t local_row = std::int64_t(ids[i]) - row_offset;
    if (local_row < 0 || local_row >= table_rows) continue;
    const T* from = dout + i * cols;
    T* to = dtable + local_row * cols;
    for (std::int64_t j = 0; j < cols; ++j) to[j] += from[j];
  }
}

// For out (batch, seq, cols) = x + table[t] (position t of each sequence reads row t):
// dtable (>= seq rows, cols) += sum over batch of dy (batch, seq, cols), into rows 0..seq-1; rows
// past seq are untouched. The sums over batch run in accumulator_t<T>. The gradient with respect
// to x is dy itself. dtable must not overlap dy.
template <class T>
void position_embedding_backward(const T* dy, T* dtable, std::int64_t batch, std::int64_t seq,
                                 std::int64_t cols) {
  constexpr auto where = "cpu::position_embedding_backward";
  detail::check_size(where, "batch", batch);
  detail::check_size(where, "seq", seq);
  detail::check_size(where, "cols", cols);
  detail::check_pointer(where, "dy", dy, batch * seq * cols);
  detail::check_pointer(where, "dtable", dtable, seq * cols);
  std::vector<accumulator_t<T>> sums(static_cast<std::size_t>(cols));
  for (std::int64_t t = 0; t < seq; ++t) {
    std::fill(sums.begin(), sums.end(), accumulator_t<T>(0));
    for (std::int64_t b = 0; b < batch; ++b) {
      const T* row = dy + (b * seq + t) * cols;
      for (std::int64_t j = 0; j < cols; ++j) sums[static_cast<std::size_t>(j)] += row[j];
    }
    T* to = dtable + t * cols;
    for (std::int64_t j = 0; j < cols; ++j) to[j] += T(sums[static_cast<std::size_t>(j)]);
  }
}

}  // namespace shardgraph::cpu
