#pragma once
// Normalizations over the last dimension: LayerNorm (GPT-2) and RMSNorm (LLaMA).
// Row sums accumulate in accumulator_t<T>; the per-element arithmetic is in T.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

namespace detail {

inline void check_norm_arguments(std::string_view where, std::int64_t rows, std::int64_t cols, double eps) {
  check_size(where, "rows", rows);
  check_size(where, "cols", cols);
  if (rows > 0 && cols == 0) fail(where, "a row of 0 columns cannot be normalized", "pass cols >= 1");
  if (!(eps >= 0))
    fail(where, "eps is negative or NaN", "pass the model's eps, e.g. 1e-5 (GPT-2) or 1e-6 (LLaMA)");
}

}  // namespace detail

// y (rows, cols) = (x - mean) / sqrt(var + eps) * w + b, per row of x (rows, cols); w, b (cols).
// var is the biased variance (divides by cols), as torch.nn.LayerNorm. y may be x (in place).
template <class T>
void layer_norm(const T* x, const T* w, const T* b, T* y, std::int64_t rows, std::int64_t cols, double eps) {
  constexpr auto where = "cpu::layer_norm";
  detail::check_norm_arguments(where, rows, cols, eps);
  detail::check_pointer(where, "x", x, rows * cols);
  detail::check_pointer(where, "w", w, cols);
  detail::check_pointer(where, "b", b, cols);
  detail::check_pointer(where, "y", y, rows * cols);
  using acc = accumulator_t<T>;
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* row = x + i * cols;
    T* out = y + i * cols;
    acc sum = 0;
    for (std::int64_t j = 0; j < cols; ++j) sum += row[j];
    const acc mean = sum / acc(cols);
    // Two passes (mean, then squared deviations): no cancellation when |mean| >> std.
    acc squares = 0;
    for (std::int64_t j = 0; j < cols; ++j) {
      const acc deviation = acc(row[j]) - mean;
      squares += deviation * deviation;
    }
    const acc variance = squares / acc(cols);
    const T mean_t = T(mean);
    const T inverse_std = T(1 / std::sqrt(variance + eps));
    for (std::int64_t j = 0; j < cols; ++j) out[j] = (row[j] - mean_t) * inverse_std * w[j] + b[j];
  }
}

// y (rows, cols) = w * (x / sqrt(mean(x^2) + eps)), per row of x (rows, cols); w (cols).
// As HF LlamaRMSNorm, but in T throughout (HF upcasts to f32; for f32 and f64 that is the same).
// y may be x (in place).
template <class T>
void rms_norm(const T* x, const T* w, T* y, std::int64_t rows, std::int64_t cols, double eps) {
  constexpr auto where = "cpu::rms_norm";
  detail::check_norm_arguments(where, rows, cols, eps);
  detail::check_pointer(where, "x", x, rows * cols);
  detail::check_pointer(where, "w", w, cols);
  detail::check_pointer(where, "y", y, rows * cols);
  using acc = accumulator_t<T>;
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* row = x + i * cols;
    T* out = y + i * cols;
    acc squares = 0;
    for (std::int64_t j = 0; j < cols; ++j) squares += acc(row[j]) * acc(row[j]);
    const T variance = T(squares / acc(cols));
    const T inverse_rms = T(1) / std::sqrt(variance + T(eps));
    for (std::int64_t j = 0; j < cols; ++j) out[j] = w[j] * (row[j] * inverse_rms);
  }
}

}  // namespace shardgraph::cpu
