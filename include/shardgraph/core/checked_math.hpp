#pragma once
// Checked arithmetic on sizes: element counts, byte counts and offsets. A size comes from a user's
// config or a file, so its product can exceed what 64 bits hold; wrapped around, it would make a
// small (or zero) allocation that later reads and writes run past. Every product or sum of sizes
// goes through these, which throw shardgraph::error naming where the size was computed instead.
//
//   checked_multiply(vocab, model, "bind: embedding 'wte'")            // vocab * model, or the error
//   checked_product(shape, "host_tensor")                              // 1 for an empty shape
//   checked_bytes(numel, dtype_size(t), "cpu::backend: allocate")      // as std::size_t
//
// Sizes are non-negative: a negative operand is refused too (it is a bug or a bad config, and its
// product would be meaningless).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"

namespace shardgraph {

namespace detail {
[[noreturn]] inline void size_overflow(std::string_view where, std::string_view what) {
  fail(where, std::string(what) + " does not fit in 64 bits",
       "the sizes are far larger than any device holds: check the config's sizes (vocab, hidden, heads, "
       "layers) and the batch and sequence");
}
[[noreturn]] inline void negative_size(std::string_view where, std::int64_t v) {
  fail(where, "a size is " + std::to_string(v) + ", negative",
       "give non-negative sizes; a negative one is a wrong config value or an overflow upstream");
}
}  // namespace detail

// a * b for sizes a, b >= 0.
inline std::int64_t checked_multiply(std::int64_t a, std::int64_t b, std::string_view where) {
  if (a < 0) detail::negative_size(where, a);
  if (b < 0) detail::negative_size(where, b);
  if (a != 0 && b > std::numeric_limits<std::int64_t>::max() / a)
    detail::size_overflow(where, "the product " + std::to_string(a) + " * " + std::to_string(b));
  return a * b;
}

// a + b for sizes a, b >= 0.
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view where) {
  if (a < 0) detail::negative_size(where, a);
  if (b < 0) detail::negative_size(where, b);
  if (a > std::numeric_limits<std::int64_t>::max() - b)
    detail::size_overflow(where, "the sum " + std::to_string(a) + " + " + std::to_string(b));
  return a + b;
}

// The product of a shape's dimensions (1 for a scalar's empty shape).
inline std::int64_t checked_product(std::span<const std::int64_t> dims, std::string_view where) {
  std::int64_t n = 1;
  for (const std::int64_t d : dims) n = checked_multiply(n, d, where);
  return n;
}

// numel * element_bytes as std::size_t, refused beyond what int64 holds (byte counts are also
// compared and reported as int64 elsewhere).
inline std::size_t checked_bytes(std::int64_t numel, std::size_t element_bytes, std::string_view where) {
  return static_cast<std::size_t>(checked_multiply(numel, static_cast<std::int64_t>(element_bytes), where));
}

// a + b and a * b on byte counts (std::size_t), refused beyond int64's range as above.
inline std::size_t checked_add_bytes(std::size_t a, std::size_t b, std::string_view where) {
  constexpr auto most = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
  if (a > most || b > most || a > most - b)
    detail::size_overflow(where, "the byte count " + std::to_string(a) + " + " + std::to_string(b));
  return a + b;
}
inline std::size_t checked_multiply_bytes(std::size_t a, std::size_t b, std::string_view where) {
  constexpr auto most = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
  if (a > most || b > most || (a != 0 && b > most / a))
    detail::size_overflow(where, "the byte count " + std::to_string(a) + " * " + std::to_string(b));
  return a * b;
}

}  // namespace shardgraph
