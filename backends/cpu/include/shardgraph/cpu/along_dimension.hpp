#pragma once
// The kernels along one dimension (op::concat, slice, slice_grad, sum, mean, broadcast): each sees
// a tensor as (outer, n, inner), the dimension it works along in the middle, row-major.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

namespace detail {
// [start, start + size) lies within a dimension of n.
inline void check_slice(std::string_view kernel, std::int64_t start, std::int64_t size, std::int64_t n) {
  if (start < 0 || size < 0 || start + size > n)
    fail(kernel, "the slice [" + std::to_string(start) + ", " + std::to_string(start + size) +
                     ") is not within the dimension's " + std::to_string(n),
         "pass a start and size inside the dimension");
}
}  // namespace detail

// out (outer, size, inner) = x (outer, n, inner)[:, start:start + size, :], with start + size <= n.
template <class T>
void slice_along(const T* x, T* out, std::int64_t outer, std::int64_t n, std::int64_t inner, std::int64_t start,
                 std::int64_t size) {
  detail::check_slice("cpu::slice_along", start, size, n);
  detail::check_pointer("cpu::slice_along", "x", x, outer * n * inner);
  for (std::int64_t o = 0; o < outer; ++o)
    std::copy_n(x + (o * n + start) * inner, size * inner, out + o * size * inner);
}

// out (outer, n, inner) = 0, then dy (outer, size, inner) at [:, start:start + size, :] (a slice's
// gradient).
template <class T>
void pad_along(const T* dy, T* out, std::int64_t outer, std::int64_t n, std::int64_t inner, std::int64_t start,
               std::int64_t size) {
  detail::check_slice("cpu::pad_along", start, size, n);
  std::fill_n(out, outer * n * inner, T(0));
  for (std::int64_t o = 0; o < outer; ++o)
    std::copy_n(dy + o * size * inner, size * inner, out + (o * n + start) * inner);
}

// out (outer, n[0] + ... + n[count - 1], inner) = parts[k] (outer, n[k], inner), one after another.
template <class T>
void concat_along(const T* const* parts, const std::int64_t* n, int count, T* out, std::int64_t outer,
                  std::int64_t inner) {
  std::int64_t total = 0;
  for (int k = 0; k < count; ++k) total += n[k];
  for (std::int64_t o = 0; o < outer; ++o) {
    T* row = out + o * total * inner;
    for (int k = 0; k < count; ++k) row = std::copy_n(parts[k] + o * n[k] * inner, n[k] * inner, row);
  }
}

// out (outer, inner) = the sum over j of x (outer, n, inner)[:, j, :], divided by divisor (a mean's
// global size; 1 for a sum), accumulated in double.
template <class T>
void sum_along(const T* x, T* out, std::int64_t outer, std::int64_t n, std::int64_t inner, std::int64_t divisor) {
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      accumulator_t<T> s = 0;
      for (std::int64_t j = 0; j < n; ++j) s += static_cast<accumulator_t<T>>(x[(o * n + j) * inner + i]);
      out[o * inner + i] = static_cast<T>(s / static_cast<accumulator_t<T>>(divisor));
    }
}

// out (outer, n, inner) = x (outer, inner) / divisor for every j.
template <class T>
void broadcast_along(const T* x, T* out, std::int64_t outer, std::int64_t n, std::int64_t inner,
                     std::int64_t divisor) {
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t i = 0; i < inner; ++i)
        out[(o * n + j) * inner + i] = static_cast<T>(static_cast<accumulator_t<T>>(x[o * inner + i]) /
                                                      static_cast<accumulator_t<T>>(divisor));
}

}  // namespace shardgraph::cpu
