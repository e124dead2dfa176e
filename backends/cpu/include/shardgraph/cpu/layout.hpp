#pragma once
// Head split and merge: the permutations between the token-major layout of a linear's output and
// the head-major layout that attention and rope read.
#include <algorithm>
#include <cstdint>
#include <string_view>

#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

namespace detail {

inline void check_layout_arguments(std::string_view where, const void* x, const void* y, std::int64_t batch,
                                   std::int64_t seq, std::int64_t heads, std::int64_t head_dim) {
  check_size(where, "batch", batch);
  check_size(where, "seq", seq);
  check_size(where, "heads", heads);
  check_size(where, "head_dim", head_dim);
  const std::int64_t elements = batch * seq * heads * head_dim;
  check_pointer(where, "x", x, elements);
  check_pointer(where, "y", y, elements);
  if (x == y && elements > 0) {
    fail(where, "x and y are the same buffer, but the permutation cannot run in place",
         "pass a separate output buffer");
  }
}

}  // namespace detail

// y (batch, heads, seq, head_dim) = x (batch, seq, heads, head_dim) permuted; x and y must not overlap.
template <class T>
void split_heads(const T* x, T* y, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                 std::int64_t head_dim) {
  detail::check_layout_arguments("cpu::split_heads", x, y, batch, seq, heads, head_dim);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t t = 0; t < seq; ++t) {
        const T* from = x + ((b * seq + t) * heads + h) * head_dim;
        T* to = y + ((b * heads + h) * seq + t) * head_dim;
        std::copy(from, from + head_dim, to);
      }
    }
  }
}

// y (batch, seq, heads, head_dim) = x (batch, heads, seq, head_dim) permuted; the inverse of
// split_heads. x and y must not overlap.
template <class T>
void merge_heads(const T* x, T* y, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                 std::int64_t head_dim) {
  detail::check_layout_arguments("cpu::merge_heads", x, y, batch, seq, heads, head_dim);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < seq; ++t) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const T* from = x + ((b * heads + h) * seq + t) * head_dim;
        T* to = y + ((b * seq + t) * heads + h) * head_dim;
        std::copy(from, from + head_dim, to);
      }
    }
  }
}

}  // namespace shardgraph::cpu
