#pragma once
// The table a rope kernel reads (kernel_call::rope): one inverse frequency per rotated pair and
// the factor cos and sin are multiplied by, computed on the host at bind from a rope node's
// rope_scaling (ir/rope_scaling.hpp), the head size and the sequence length, in double, with the
// formulas of HF transformers' modeling_rope_utils.py. Every kind then costs the kernels the same:
//   angle(p, i) = p * inverse_frequency[i]
//   out[i] = attention_factor * (x[i] cos - x[i + half] sin), out[i + half] likewise.
// A fixed-size value, so a GPU kernel takes it as an argument (no device memory).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <sstream>
#include <string>

#include "shardgraph/core/error.hpp"
#include "shardgraph/ir/rope_scaling.hpp"

namespace shardgraph::compute {

struct rope_frequencies {
  static constexpr std::int64_t max_pairs = 256;  // head_dim up to 512
  std::int64_t pairs = 0;                         // head_dim / 2
  double attention_factor = 1.0;
  double inverse_frequency[max_pairs]{};
};

namespace detail {

inline std::string rope_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace detail

// Throws, naming `where`, when the parameters the kind reads cannot make a finite table.
inline void check_rope_scaling(const rope_scaling& s, const std::string& where) {
  using detail::rope_number;
  const std::string kind = "rope_type \"" + std::string(rope_type_name(s.type)) + "\"";
  if (!(s.theta > 0) || !std::isfinite(s.theta))
    fail(where, "rope_theta " + rope_number(s.theta) + " is not a positive number", "give the model's rope_theta, e.g. 10000");
  if (s.type == rope_type::standard) return;
  if (!(s.factor > 0) || !std::isfinite(s.factor))
    fail(where, kind + ": factor " + rope_number(s.factor) + " is not a positive number", "give the scaling factor, e.g. 2");
  if (s.type == rope_type::linear) return;
  if (s.original_max_positions < 1)
    fail(where,
         kind + ": " + (s.type == rope_type::dynamic ? "max_position_embeddings " : "original_max_position_embeddings ") +
             std::to_string(s.original_max_positions) + " is not positive",
         "give the length the model was trained at");
  if (s.type == rope_type::llama3 && !(s.high_freq_factor > s.low_freq_factor && s.low_freq_factor > 0))
    fail(where,
         kind + ": low_freq_factor " + rope_number(s.low_freq_factor) + " and high_freq_factor " +
             rope_number(s.high_freq_factor) + " do not satisfy 0 < low < high",
         "give the factors of the checkpoint, e.g. 1 and 4");
  if (s.type == rope_type::yarn && s.theta == 1)
    fail(where, kind + ": rope_theta 1 gives no correction range (log 1 = 0)", "give the model's rope_theta");
  if (s.type == rope_type::yarn && !(s.beta_fast > 0 && s.beta_slow > 0 && s.attention_factor >= 0))
    fail(where,
         kind + ": beta_fast " + rope_number(s.beta_fast) + ", beta_slow " + rope_number(s.beta_slow) +
             " or attention_factor " + rope_number(s.attention_factor) + " is not positive",
         "give positive numbers (attention_factor 0 derives it from factor)");
}

namespace detail {

// yarn's pair index at which `rotations` full turns fit in the original length (fractional).
inline double yarn_correction_dim(double rotations, double dim, double theta, double original) {
  return dim * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
}

inline void yarn_frequencies(const rope_scaling& s, std::int64_t head_dim, rope_frequencies& t) {
  const double dim = double(head_dim), original = double(s.original_max_positions);
  double low = yarn_correction_dim(s.beta_fast, dim, s.theta, original);
  double high = yarn_correction_dim(s.beta_slow, dim, s.theta, original);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // HF's guard against a zero-width ramp
  for (std::int64_t i = 0; i < t.pairs; ++i) {
    const double extrapolation = 1.0 / std::pow(s.theta, double(2 * i) / dim);
    const double interpolation = extrapolation / s.factor;
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);  // 0: extrapolate
    t.inverse_frequency[i] = interpolation * ramp + extrapolation * (1 - ramp);
  }
  t.attention_factor = s.attention_factor > 0 ? s.attention_factor
                       : s.factor <= 1       ? 1.0
                                             : 0.1 * std::log(s.factor) + 1.0;
}

inline void llama3_frequencies(const rope_scaling& s, rope_frequencies& t) {
  const double original = double(s.original_max_positions);
  const double low_wavelength = original / s.low_freq_factor;    // longer: divided by factor
  const double high_wavelength = original / s.high_freq_factor;  // shorter: kept
  for (std::int64_t i = 0; i < t.pairs; ++i) {
    const double f = t.inverse_frequency[i];
    const double wavelength = 2 * std::numbers::pi / f;
    if (wavelength < high_wavelength) continue;
    if (wavelength > low_wavelength) {
      t.inverse_frequency[i] = f / s.factor;
      continue;
    }
    const double smooth = (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    t.inverse_frequency[i] = (1 - smooth) * f / s.factor + smooth * f;
  }
}

}  // namespace detail

// The table of a rope over heads of `head_dim` features and sequences of `seq` tokens (dynamic
// scaling depends on it: HF recomputes its frequencies for a sequence longer than
// max_position_embeddings). Throws, naming `where`, for an odd or too large head_dim or
// parameters that give no finite table.
inline rope_frequencies make_rope_frequencies(const rope_scaling& s, std::int64_t head_dim, std::int64_t seq,
                                              const std::string& where = "rope") {
  if (head_dim < 2 || head_dim % 2 != 0 || head_dim / 2 > rope_frequencies::max_pairs)
    fail(where, "head_dim " + std::to_string(head_dim) + " is not an even number from 2 to " +
                    std::to_string(2 * rope_frequencies::max_pairs),
         "rotate-half pairs feature i with i + head_dim/2; use an even head_dim");
  check_rope_scaling(s, where);
  if (s.type == rope_type::dynamic && head_dim == 2)
    fail(where, "rope_type \"dynamic\": head_dim 2 leaves no exponent d / (d - 2)",
         "dynamic scaling needs a head_dim above 2");
  rope_frequencies t;
  t.pairs = head_dim / 2;
  double theta = s.theta;
  if (s.type == rope_type::dynamic) {
    const double length = double(std::max(seq, s.original_max_positions));
    const double d = double(head_dim);
    theta *= std::pow(s.factor * length / double(s.original_max_positions) - (s.factor - 1), d / (d - 2));
  }
  for (std::int64_t i = 0; i < t.pairs; ++i)
    t.inverse_frequency[i] = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
  if (s.type == rope_type::linear)
    for (std::int64_t i = 0; i < t.pairs; ++i) t.inverse_frequency[i] /= s.factor;
  if (s.type == rope_type::llama3) detail::llama3_frequencies(s, t);
  if (s.type == rope_type::yarn) detail::yarn_frequencies(s, head_dim, t);
  return t;
}

}  // namespace shardgraph::compute
