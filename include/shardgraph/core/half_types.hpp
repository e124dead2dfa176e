#pragma once
// bfloat16 and float16: the 16-bit floats as value types, so that buffers of them can be moved and
// summed by the communicators and read from host tensors. Storage is the raw bits (core/half.hpp);
// arithmetic widens to float, computes, and rounds back to nearest even once per operation, which is
// what NCCL's bf16 and f16 reductions do per addition.
#include <cstdint>
#include <type_traits>

#include "shardgraph/core/half.hpp"

namespace shardgraph {

namespace detail {
// One 16-bit format: Format::encode (float -> bits, rounded) and Format::decode (bits -> float).
template <class Format>
struct sixteen_bit_float {
  std::uint16_t bits = 0;

  constexpr sixteen_bit_float() = default;
  constexpr explicit sixteen_bit_float(float value) : bits(Format::encode(value)) {}
  static constexpr sixteen_bit_float from_bits(std::uint16_t b) {
    sixteen_bit_float x;
    x.bits = b;
    return x;
  }
  constexpr explicit operator float() const { return Format::decode(bits); }
  friend constexpr sixteen_bit_float operator+(sixteen_bit_float a, sixteen_bit_float b) {
    return sixteen_bit_float(static_cast<float>(a) + static_cast<float>(b));
  }
  friend constexpr bool operator==(sixteen_bit_float a, sixteen_bit_float b) {
    return a.bits == b.bits;
  }  // bitwise
};

struct bf16_format {
  static constexpr std::uint16_t encode(float v) { return float_to_bf16(v); }
  static constexpr float decode(std::uint16_t b) { return bf16_to_float(b); }
};
struct f16_format {
  static constexpr std::uint16_t encode(float v) { return float_to_f16(v); }
  static constexpr float decode(std::uint16_t b) { return f16_to_float(b); }
};
}  // namespace detail

using bfloat16 = detail::sixteen_bit_float<detail::bf16_format>;
using float16 = detail::sixteen_bit_float<detail::f16_format>;

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2 && std::is_trivially_copyable_v<bfloat16> &&
              std::is_trivially_copyable_v<float16>);

// The 16-bit float types, which communicators sum although they are not arithmetic types.
template <class T>
inline constexpr bool is_half_float_v =
    std::is_same_v<std::remove_cv_t<T>, bfloat16> || std::is_same_v<std::remove_cv_t<T>, float16>;

}  // namespace shardgraph
