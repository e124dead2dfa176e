#pragma once
// Floating-point buffers of any width on the cpu backend: reading and writing elements of f64, f32,
// bf16 and f16 buffers as numbers, and converting a buffer into another of a different dtype.
// Narrowing rounds to nearest even (core/half.hpp), as a GPU's conversion instructions do.
#include <cstddef>
#include <string>
#include <type_traits>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/half_types.hpp"
#include "shardgraph/cpu/buffer.hpp"

namespace shardgraph::cpu {

constexpr bool is_half_float(dtype t) { return t == dtype::bf16 || t == dtype::f16; }

// x as float or double (16-bit values widen exactly).
template <class T>
constexpr auto widen(T x) {
  if constexpr (is_half_float_v<T>)
    return static_cast<float>(x);
  else
    return x;
}

// v rounded to T.
template <class T>
constexpr T narrow(double v) {
  if constexpr (is_half_float_v<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// fn(T*) with T the buffer's floating element type (double, float, bfloat16 or float16).
template <class Fn>
decltype(auto) with_any_float(const buffer& b, const char* where, Fn&& fn) {
  auto* bytes = const_cast<std::byte*>(b.bytes());
  switch (b.type()) {
    case dtype::f64:
      return fn(reinterpret_cast<double*>(bytes));
    case dtype::f32:
      return fn(reinterpret_cast<float*>(bytes));
    case dtype::bf16:
      return fn(reinterpret_cast<bfloat16*>(bytes));
    case dtype::f16:
      return fn(reinterpret_cast<float16*>(bytes));
    default:
      fail(where,
           "a buffer of " + std::string(dtype_name(b.type())) + " where floating-point values were expected",
           "this is a bug in the caller; please report it");
  }
}

// to[i] = from[i] rounded to to's dtype; equal element counts, any floating dtypes.
inline void convert_floats(const buffer& from, buffer& to) {
  if (from.numel() != to.numel())
    fail("cpu::backend::convert",
         std::to_string(from.numel()) + " elements into " + std::to_string(to.numel()),
         "this is a bug in the caller; please report it");
  with_any_float(from, "cpu::backend::convert", [&](auto* x) {
    with_any_float(to, "cpu::backend::convert", [&](auto* y) {
      using T = std::remove_pointer_t<decltype(y)>;
      for (std::int64_t i = 0; i < from.numel(); ++i) y[i] = narrow<T>(widen(x[i]));
    });
  });
}

}  // namespace shardgraph::cpu
