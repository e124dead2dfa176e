#include "shardgraph/core/half.hpp"

#include <cmath>
#include <cstdint>
#include <limits>

#include "catch.hpp"

using shardgraph::bf16_to_float;
using shardgraph::f16_to_float;
using shardgraph::float_to_bf16;
using shardgraph::float_to_f16;

namespace {

// f16 by its definition, independent of the bit manipulation under test.
double f16_reference(std::uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

}  // namespace

TEST_CASE("bf16 and f16 widen exactly, at compile time too", "[core]") {
  STATIC_REQUIRE(bf16_to_float(0x3f80) == 1.0f);
  STATIC_REQUIRE(f16_to_float(0x3c00) == 1.0f);
  CHECK(bf16_to_float(0xc000) == -2.0f);
  CHECK(bf16_to_float(0x0001) == std::ldexp(1.0f, -133));  // smallest bf16 subnormal, a float subnormal
  CHECK(std::isinf(bf16_to_float(0x7f80)));
  CHECK(std::isnan(bf16_to_float(0x7fc1)));
  CHECK(std::signbit(bf16_to_float(0x8000)));
  CHECK(f16_to_float(0x7bff) == 65504.0f);
  CHECK(f16_to_float(0x0400) == std::ldexp(1.0f, -14));  // smallest normal
  CHECK(f16_to_float(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(f16_to_float(0x83ff) == -std::ldexp(1023.0f, -24));
  CHECK(f16_to_float(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(std::signbit(f16_to_float(0x8000)));
  for (unsigned b = 0; b <= 0xffff; ++b) {
    const double expected = f16_reference(static_cast<std::uint16_t>(b));
    const float got = f16_to_float(static_cast<std::uint16_t>(b));
    if (std::isnan(expected))
      REQUIRE(std::isnan(got));
    else
      REQUIRE(static_cast<double>(got) == expected);
  }
}

TEST_CASE("every bf16 and f16 value survives float and back", "[core]") {
  for (unsigned b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    if (std::isnan(f16_to_float(bits)))
      REQUIRE(std::isnan(f16_to_float(float_to_f16(f16_to_float(bits)))));
    else
      REQUIRE(float_to_f16(f16_to_float(bits)) == bits);
    if (std::isnan(bf16_to_float(bits)))
      REQUIRE(std::isnan(bf16_to_float(float_to_bf16(bf16_to_float(bits)))));
    else
      REQUIRE(float_to_bf16(bf16_to_float(bits)) == bits);
  }
}

TEST_CASE("narrowing rounds to nearest, ties to even, at every midpoint", "[core]") {
  // The midpoint of two neighbours is exact in float; it must go to the one with an even last bit.
  for (std::uint16_t b = 0; b < 0x7bff; ++b) {
    const float low = f16_to_float(b), high = f16_to_float(static_cast<std::uint16_t>(b + 1));
    const float middle = static_cast<float>((static_cast<double>(low) + high) / 2);
    const std::uint16_t even = (b & 1) ? static_cast<std::uint16_t>(b + 1) : b;
    REQUIRE(float_to_f16(middle) == even);
    REQUIRE(float_to_f16(-middle) == (even | 0x8000));
    REQUIRE(float_to_f16(std::nextafter(middle, 0.0f)) == b);
    REQUIRE(float_to_f16(std::nextafter(middle, HUGE_VALF)) == b + 1);
  }
  for (std::uint16_t b = 0; b < 0x7f7f; ++b) {
    const float low = bf16_to_float(b), high = bf16_to_float(static_cast<std::uint16_t>(b + 1));
    const float middle = static_cast<float>((static_cast<double>(low) + high) / 2);
    REQUIRE(float_to_bf16(middle) == ((b & 1) ? b + 1 : b));
    REQUIRE(float_to_bf16(std::nextafter(middle, 0.0f)) == b);
    REQUIRE(float_to_bf16(std::nextafter(middle, HUGE_VALF)) == b + 1);
  }
}

TEST_CASE("narrowing overflows to inf and underflows to zero where IEEE says", "[core]") {
  CHECK(float_to_f16(65519.0f) == 0x7bff);
  CHECK(float_to_f16(65520.0f) == 0x7c00);
  CHECK(float_to_f16(-1e10f) == 0xfc00);
  CHECK(float_to_f16(std::ldexp(1.0f, -25)) == 0x0000);  // a tie with zero
  CHECK(float_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(float_to_f16(std::ldexp(1.0f, -30)) == 0x0000);
  CHECK(float_to_f16(-0.0f) == 0x8000);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up past the largest bf16
  CHECK(float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::signaling_NaN()))));
}
