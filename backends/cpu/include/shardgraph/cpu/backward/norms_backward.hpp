#pragma once
// Gradients of layer_norm and rms_norm (norms.hpp). Each recomputes the row statistics from x, as
// the forward does, rather than reading saved ones: the backward needs only the forward's inputs.
// Row sums and the sums over rows of the parameter gradients accumulate in accumulator_t<T>; the
// per-element arithmetic is in T.
#include <cmath>
#include <cstdint>
#include <vector>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/checks.hpp"
#include "shardgraph/cpu/norms.hpp"

namespace shardgraph::cpu {

// For y = layer_norm(x, w, b) with xhat = (x - mean) / sqrt(var + eps), per row:
//   dx = (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) / sqrt(var + eps),   dxhat = dy * w
//   dw += sum over rows of dy * xhat,   db += sum over rows of dy
// x, dy, dx (rows, cols); w, dw, db (cols). dx is written; dw and db accumulate (zero them before
// the first call of a step). dx may be x or dy (in place); dw and db overlap nothing.
template <class T>
void layer_norm_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, std::int64_t rows,
                         std::int64_t cols, double eps) {
  constexpr auto where = "cpu::layer_norm_backward";
  detail::check_norm_arguments(where, rows, cols, eps);
  detail::check_pointer(where, "x", x, rows * cols);
  detail::check_pointer(where, "w", w, cols);
  detail::check_pointer(where, "dy", dy, rows * cols);
  detail::check_pointer(where, "dx", dx, rows * cols);
  detail::check_pointer(where, "dw", dw, cols);
  detail::check_pointer(where, "db", db, cols);
  using acc = accumulator_t<T>;
  std::vector<acc> dw_sums(static_cast<std::size_t>(cols), 0);
  std::vector<acc> db_sums(dw_sums.size(), 0);
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* row = x + i * cols;
    const T* dy_row = dy + i * cols;
    T* dx_row = dx + i * cols;
    acc sum = 0;
    for (std::int64_t j = 0; j < cols; ++j) sum += row[j];
    const acc mean = sum / acc(cols);
    acc squares = 0;
    for (std::int64_t j = 0; j < cols; ++j) {
      const acc deviation = acc(row[j]) - mean;
      squares += deviation * deviation;
    }
    const acc variance = squares / acc(cols);
    const T mean_t = T(mean);
    const T inverse_std = T(1 / std::sqrt(variance + eps));

    acc dxhat_sum = 0;
    acc dxhat_xhat_sum = 0;
    for (std::int64_t j = 0; j < cols; ++j) {
      const auto at = static_cast<std::size_t>(j);
      const T xhat = (row[j] - mean_t) * inverse_std;
      const T dxhat = dy_row[j] * w[j];
      dxhat_sum += dxhat;
      dxhat_xhat_sum += acc(dxhat) * acc(xhat);
      dw_sums[at] += acc(dy_row[j]) * acc(xhat);
      db_sums[at] += dy_row[j];
    }
    const T dxhat_mean = T(dxhat_sum / acc(cols));
    const T dxhat_xhat_mean = T(dxhat_xhat_sum / acc(cols));
    for (std::int64_t j = 0; j < cols; ++j) {
      const T xhat = (row[j] - mean_t) * inverse_std;
      dx_row[j] = (dy_row[j] * w[j] - dxhat_mean - xhat * dxhat_xhat_mean) * inverse_std;
    }
  }
  for (std::int64_t j = 0; j < cols; ++j) {
    dw[j] += T(dw_sums[static_cast<std::size_t>(j)]);
    db[j] += T(db_sums[static_cast<std::size_t>(j)]);
  }
}

// For y = rms_norm(x, w) with r = 1 / sqrt(mean(x^2) + eps), per row:
//   dx = r * (g - x * r^2 * mean(g * x)),   g = dy * w
//   dw += sum over rows of dy * x * r
// x, dy, dx (rows, cols); w, dw (cols). dx is written; dw accumulates (zero it before the first
// call of a step). dx may be x or dy (in place); dw overlaps nothing.
template <class T>
void rms_norm_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, std::int64_t rows,
                       std::int64_t cols, double eps) {
  constexpr auto where = "cpu::rms_norm_backward";
  detail::check_norm_arguments(where, rows, cols, eps);
  detail::check_pointer(where, "x", x, rows * cols);
  detail::check_pointer(where, "w", w, cols);
  detail::check_pointer(where, "dy", dy, rows * cols);
  detail::check_pointer(where, "dx", dx, rows * cols);
  detail::check_pointer(where, "dw", dw, cols);
  using acc = accumulator_t<T>;
  std::vector<acc> dw_sums(static_cast<std::size_t>(cols), 0);
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* row = x + i * cols;
    const T* dy_row = dy + i * cols;
    T* dx_row = dx + i * cols;
    acc squares = 0;
    for (std::int64_t j = 0; j < cols; ++j) squares += acc(row[j]) * acc(row[j]);
    const T variance = T(squares / acc(cols));
    const T inverse_rms = T(1) / std::sqrt(variance + T(eps));

    acc gx_sum = 0;
    for (std::int64_t j = 0; j < cols; ++j) {
      gx_sum += acc(dy_row[j] * w[j]) * acc(row[j]);
      dw_sums[static_cast<std::size_t>(j)] += acc(dy_row[j]) * acc(row[j] * inverse_rms);
    }
    const T correction = T(gx_sum / acc(cols)) * inverse_rms * inverse_rms;
    for (std::int64_t j = 0; j < cols; ++j) {
      dx_row[j] = inverse_rms * (dy_row[j] * w[j] - row[j] * correction);
    }
  }
  for (std::int64_t j = 0; j < cols; ++j) dw[j] += T(dw_sums[static_cast<std::size_t>(j)]);
}

}  // namespace shardgraph::cpu
