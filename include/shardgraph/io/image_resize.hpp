#pragma once
// rgb8_image and resize_bicubic: an 8-bit RGB image resized as Pillow's Image.resize(size,
// Image.BICUBIC) resizes it, which HF's PIL image processors (CLIPImageProcessorPil) call.
//
// Pillow resamples separably, rows first (into 8-bit values), then columns. Output pixel i of a
// pass over n input pixels to m samples the input around center = (i + 0.5) n / m with the
// bicubic kernel (a = -0.5) widened by scale = max(n / m, 1) (so that a reduction averages every
// input pixel: antialiasing), over the inputs j in [center - 2 scale, center + 2 scale):
//   w_j = cubic((j - center + 0.5) / scale),  weights normalised to sum 1,
// then converted to fixed point with 22 fractional bits, summed with rounding and clamped to
// [0, 255]. This file follows Pillow's Resample.c step for step, so the result is Pillow's exactly.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"

namespace shardgraph::io {

// An image as decoders give it: height rows of width pixels, each 3 values (R, G, B), row-major.
struct rgb8_image {
  std::int64_t width = 0, height = 0;
  std::vector<std::uint8_t> values;  // (height, width, 3)

  std::uint8_t at(std::int64_t row, std::int64_t column, int channel) const {
    return values[static_cast<std::size_t>((row * width + column) * 3 + channel)];
  }
};

namespace detail {

inline constexpr int resample_precision_bits = 32 - 8 - 2;  // Pillow's PRECISION_BITS

inline double bicubic_kernel(double x) {  // Pillow's bicubic_filter, a = -0.5
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// The taps of one output sample: inputs [first, first + weights.size()) with fixed-point weights.
struct resample_taps {
  std::int64_t first = 0;
  std::vector<std::int32_t> weights;
};

// Pillow's precompute_coeffs and normalize_coeffs_8bpc for `in` inputs to `out` samples.
inline std::vector<resample_taps> bicubic_taps(std::int64_t in, std::int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double widened = scale < 1.0 ? 1.0 : scale, support = 2.0 * widened;
  std::vector<resample_taps> taps(static_cast<std::size_t>(out));
  for (std::int64_t i = 0; i < out; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    std::int64_t first = static_cast<std::int64_t>(center - support + 0.5);
    std::int64_t last = static_cast<std::int64_t>(center + support + 0.5);
    first = first < 0 ? 0 : first;
    last = last > in ? in : last;
    std::vector<double> w;
    double sum = 0;
    for (std::int64_t j = first; j < last; ++j) {
      w.push_back(bicubic_kernel((static_cast<double>(j) - center + 0.5) / widened));
      sum += w.back();
    }
    resample_taps& t = taps[static_cast<std::size_t>(i)];
    t.first = first;
    for (double x : w) {
      const double fixed = (sum != 0.0 ? x / sum : x) * (1 << resample_precision_bits);
      t.weights.push_back(static_cast<std::int32_t>(fixed < 0 ? fixed - 0.5 : fixed + 0.5));
    }
  }
  return taps;
}

// One pass: along rows (horizontal) or along columns, to `samples` outputs on that axis.
inline rgb8_image resample_pass(const rgb8_image& in, std::int64_t samples, bool horizontal) {
  const std::vector<resample_taps> taps = bicubic_taps(horizontal ? in.width : in.height, samples);
  rgb8_image out{
      .width = horizontal ? samples : in.width, .height = horizontal ? in.height : samples, .values = {}};
  out.values.resize(static_cast<std::size_t>(out.width * out.height * 3));
  for (std::int64_t row = 0; row < out.height; ++row)
    for (std::int64_t column = 0; column < out.width; ++column) {
      const resample_taps& t = taps[static_cast<std::size_t>(horizontal ? column : row)];
      for (int c = 0; c < 3; ++c) {
        std::int32_t sum = 1 << (resample_precision_bits - 1);  // rounds the shift below
        for (std::size_t k = 0; k < t.weights.size(); ++k) {
          const std::int64_t from = t.first + static_cast<std::int64_t>(k);
          sum += (horizontal ? in.at(row, from, c) : in.at(from, column, c)) * t.weights[k];
        }
        const std::int32_t value = sum <= 0 ? 0 : sum >> resample_precision_bits;
        out.values[static_cast<std::size_t>((row * out.width + column) * 3 + c)] =
            static_cast<std::uint8_t>(value > 255 ? 255 : value);
      }
    }
  return out;
}

}  // namespace detail

// `in` resized to width x height as Pillow's Image.resize(BICUBIC): rows first, then columns, each
// pass only where that side changes.
inline rgb8_image resize_bicubic(const rgb8_image& in, std::int64_t width, std::int64_t height) {
  if (in.width < 1 || in.height < 1 ||
      static_cast<std::int64_t>(in.values.size()) != in.width * in.height * 3)
    fail("resize_bicubic",
         "the image is " + std::to_string(in.width) + " x " + std::to_string(in.height) + " with " +
             std::to_string(in.values.size()) + " values",
         "give a non-empty image of width * height * 3 values (R, G, B)");
  if (width < 1 || height < 1)
    fail("resize_bicubic", "the size asked is " + std::to_string(width) + " x " + std::to_string(height),
         "give a positive width and height");
  const rgb8_image rows = width == in.width ? in : detail::resample_pass(in, width, true);
  return height == in.height ? rows : detail::resample_pass(rows, height, false);
}

}  // namespace shardgraph::io
