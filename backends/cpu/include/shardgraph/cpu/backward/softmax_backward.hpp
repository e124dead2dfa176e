#pragma once
// Gradient of softmax over the last dimension (softmax.hpp), from its output: with y = softmax(x),
// dx = y * (dy - sum(dy * y)) per row. The row sum accumulates in accumulator_t<T>.
#include <cstdint>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

// dx (cols) = y * (dy - sum(dy * y)) for one row; cols >= 1. dx may be dy (in place).
template <class T>
void softmax_backward_row(const T* y, const T* dy, T* dx, std::int64_t cols) {
  accumulator_t<T> dot = 0;
  for (std::int64_t j = 0; j < cols; ++j) dot += accumulator_t<T>(dy[j]) * accumulator_t<T>(y[j]);
  const T dot_t = T(dot);
  for (std::int64_t j = 0; j < cols; ++j) dx[j] = y[j] * (dy[j] - dot_t);
}

// y, dy, dx (rows, cols); y is the forward's output softmax(x). dx is written and may be dy or y
// (in place).
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols) {
  constexpr auto where = "cpu::softmax_backward";
  detail::check_size(where, "rows", rows);
  detail::check_size(where, "cols", cols);
  if (rows > 0 && cols == 0) fail(where, "a row of 0 columns has no softmax", "pass cols >= 1");
  detail::check_pointer(where, "y", y, rows * cols);
  detail::check_pointer(where, "dy", dy, rows * cols);
  detail::check_pointer(where, "dx", dx, rows * cols);
  for (std::int64_t i = 0; i < rows; ++i)
    softmax_backward_row(y + i * cols, dy + i * cols, dx + i * cols, cols);
}

}  // namespace shardgraph::cpu
