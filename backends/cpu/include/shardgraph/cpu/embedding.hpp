#pragma once
// Embedding lookup, vocab-parallel: each rank holds rows [row_offset, row_offset + table_rows) of
// the full table, writes its rows and zeros elsewhere, and an all-reduce (sum) over the ranks
// completes the lookup. With one rank, row_offset = 0 and table_rows = vocab.
#include <algorithm>
#include <cstdint>

#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

// out (n, cols): row i = table[ids[i] - row_offset] if row_offset <= ids[i] < row_offset + table_rows,
// else zeros. ids (n); table (table_rows, cols). An id outside every rank's range (negative, or past
// the vocabulary) gives zeros everywhere: this kernel cannot see the global vocabulary, so callers
// that load tokens check ids against it.
template <class T, class Id>
void embedding(const Id* ids, const T* table, T* out, std::int64_t n, std::int64_t table_rows,
               std::int64_t cols, std::int64_t row_offset) {
  constexpr auto where = "cpu::embedding";
  detail::check_size(where, "n", n);
  detail::check_size(where, "table_rows", table_rows);
  detail::check_size(where, "cols", cols);
  detail::check_size(where, "row_offset", row_offset);
  detail::check_pointer(where, "ids", ids, n);
  detail::check_pointer(where, "table", table, table_rows * cols);
  detail::check_pointer(where, "out", out, n * cols);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t local_row = std::int64_t(ids[i]) - row_offset;
    T* to = out + i * cols;
    if (local_row >= 0 && local_row < table_rows) {
      const T* from = table + local_row * cols;
      std::copy(from, from + cols, to);
    } else {
      std::fill(to, to + cols, T(0));
    }
  }
}

}  // namespace shardgraph::cpu
