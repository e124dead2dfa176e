#pragma once
// The two 16-bit floating-point formats of model files, held as their raw bits (std::uint16_t):
//   bf16 (bfloat16): 1 sign, 8 exponent, 7 mantissa bits: the top half of an IEEE float.
//   f16 (IEEE binary16): 1 sign, 5 exponent (bias 15), 10 mantissa bits.
// Widening to float is exact for every bit pattern (subnormals, infinities, NaN payloads kept).
// Narrowing from float rounds to nearest, ties to even, as PyTorch and NumPy do; NaN stays NaN.
#include <bit>
#include <cstdint>

namespace shardgraph {

constexpr float bf16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

constexpr std::uint16_t float_to_bf16(float value) {
  const auto x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);  // ties to even; overflow carries into inf
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

constexpr float f16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);  // signed zero
    // Subnormal: mantissa * 2^-24; shift it up until the implicit bit appears, lowering the exponent.
    exponent = 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3ffu;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));  // 112 = 127 - 15
}

constexpr std::uint16_t float_to_f16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t x = bits & 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));  // NaN
  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  const auto round_shift = [](std::uint32_t m, std::uint32_t shift) {       // m / 2^shift, ties to even
    const std::uint32_t q = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    return q + ((rest > half || (rest == half && (q & 1u))) ? 1u : 0u);
  };
  if (x < 0x38800000u) {  // below 2^-14: a subnormal half (or zero), counted in units of 2^-24
    const std::uint32_t exponent = x >> 23;
    if (exponent < 102) return sign;  // below 2^-25: rounds to zero
    const std::uint32_t mantissa = (x & 0x7fffffu) | 0x800000u;
    return static_cast<std::uint16_t>(sign | round_shift(mantissa, 126u - exponent));
  }
  // Normal: rebias the exponent; a carry out of the mantissa correctly bumps the exponent.
  const std::uint32_t rebiased = x - (112u << 23);
  return static_cast<std::uint16_t>(sign | round_shift(rebiased, 13));
}

}  // namespace shardgraph
