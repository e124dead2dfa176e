#pragma once
// Softmax over the last dimension, numerically stable (the row maximum is subtracted first).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

// y (cols) = softmax(x (cols)); cols >= 1. y may be x (in place).
template <class T>
void softmax_row(const T* x, T* y, std::int64_t cols) {
  const T row_max = *std::max_element(x, x + cols);
  accumulator_t<T> sum = 0;
  for (std::int64_t j = 0; j < cols; ++j) {
    y[j] = std::exp(x[j] - row_max);
    sum += y[j];
  }
  const T inverse_sum = T(1 / sum);
  for (std::int64_t j = 0; j < cols; ++j) y[j] *= inverse_sum;
}

// y (rows, cols) = softmax of each row of x (rows, cols). y may be x (in place).
template <class T>
void softmax(const T* x, T* y, std::int64_t rows, std::int64_t cols) {
  constexpr auto where = "cpu::softmax";
  detail::check_size(where, "rows", rows);
  detail::check_size(where, "cols", cols);
  if (rows > 0 && cols == 0) fail(where, "a row of 0 columns has no softmax", "pass cols >= 1");
  detail::check_pointer(where, "x", x, rows * cols);
  detail::check_pointer(where, "y", y, rows * cols);
  for (std::int64_t i = 0; i < rows; ++i) softmax_row(x + i * cols, y + i * cols, cols);
}

}  // namespace shardgraph::cpu
