#pragma once
// Element types of graph values. Fixed at compile time per node.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "shardgraph/core/half_types.hpp"

namespace shardgraph {

enum class dtype : std::uint8_t { f64, f32, bf16, f16, i64, i32 };

constexpr std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::f64: return "f64";
    case dtype::f32: return "f32";
    case dtype::bf16: return "bf16";
    case dtype::f16: return "f16";
    case dtype::i64: return "i64";
    case dtype::i32: return "i32";
  }
  return "?";
}

constexpr std::size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::f64: case dtype::i64: return 8;
    case dtype::f32: case dtype::i32: return 4;
    case dtype::bf16: case dtype::f16: return 2;
  }
  return 0;
}

constexpr bool is_floating(dtype t) { return t == dtype::f64 || t == dtype::f32 || t == dtype::bf16 || t == dtype::f16; }

template <class T> constexpr dtype dtype_of();
template <> constexpr dtype dtype_of<double>() { return dtype::f64; }
template <> constexpr dtype dtype_of<float>() { return dtype::f32; }
template <> constexpr dtype dtype_of<std::int64_t>() { return dtype::i64; }
template <> constexpr dtype dtype_of<std::int32_t>() { return dtype::i32; }
template <> constexpr dtype dtype_of<bfloat16>() { return dtype::bf16; }
template <> constexpr dtype dtype_of<float16>() { return dtype::f16; }

// Calls fn(T{}) with the host element type T of t (bfloat16 and float16 for the 16-bit floats).
// Returns false, calling nothing, for a dtype it does not know, so the caller says what it cannot do.
template <class Fn>
constexpr bool visit_host_element(dtype t, Fn&& fn) {
  switch (t) {
    case dtype::f64: fn(double{}); return true;
    case dtype::f32: fn(float{}); return true;
    case dtype::bf16: fn(bfloat16{}); return true;
    case dtype::f16: fn(float16{}); return true;
    case dtype::i64: fn(std::int64_t{}); return true;
    case dtype::i32: fn(std::int32_t{}); return true;
  }
  return false;
}

}  // namespace shardgraph
