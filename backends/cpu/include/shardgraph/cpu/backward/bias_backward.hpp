#pragma once
// The gradient of add_bias (y (rows, n) = x + b, b broadcast over rows) with respect to the bias.
// The gradient with respect to x is dy itself.
#include <cstdint>
#include <vector>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

// db (n) += sum over the rows of dy (rows, n). Accumulates, as every parameter gradient: zero db
// before the first call of a step. The column sums run in accumulator_t<T>.
template <class T>
void bias_backward(const T* dy, T* db, std::int64_t rows, std::int64_t n) {
  constexpr auto where = "cpu::bias_backward";
  detail::check_size(where, "rows", rows);
  detail::check_size(where, "n", n);
  detail::check_pointer(where, "dy", dy, rows * n);
  detail::check_pointer(where, "db", db, n);
  std::vector<accumulator_t<T>> sums(static_cast<std::size_t>(n), 0);
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* row = dy + i * n;
    for (std::int64_t j = 0; j < n; ++j) sums[static_cast<std::size_t>(j)] += row[j];
  }
  for (std::int64_t j = 0; j < n; ++j) db[j] += T(sums[static_cast<std::size_t>(j)]);
}

}  // namespace shardgraph::cpu
