#pragma once
// What a rope node rotates by: the base theta and HF transformers' RoPE scaling kinds, as the
// numbers of config.json's `rope_parameters` (or `rope_scaling`). A plain value carried by the
// rope node and its gradient; compute/rope_frequencies.hpp turns it into the per-frequency table
// the kernels read, at bind, once the head size and the sequence length are known.
//
//   kind      inverse frequency of pair i (base: 1 / theta^(2i / head_dim))          cos, sin times
//   standard  base                                                                   1
//   linear    base / factor                                                          1
//   dynamic   base with theta * (factor * L / original - (factor - 1))^(d / (d - 2)),  1
//             L = max(seq, original), original = max_position_embeddings
//   llama3    base; base / factor for wavelengths over original / low_freq_factor;   1
//             a blend between wavelengths original / high_freq_factor and that
//   yarn      a ramp between base / factor and base over the pairs between the       attention_factor
//             correction dims of beta_fast and beta_slow rotations in `original`     (0.1 ln(factor) + 1)
#include <cstdint>
#include <string_view>

namespace shardgraph {

enum class rope_type : std::uint8_t { standard, linear, dynamic, llama3, yarn };

// HF's rope_type string ("default" for standard).
constexpr std::string_view rope_type_name(rope_type t) {
  switch (t) {
    case rope_type::standard: return "default";
    case rope_type::linear: return "linear";
    case rope_type::dynamic: return "dynamic";
    case rope_type::llama3: return "llama3";
    case rope_type::yarn: return "yarn";
  }
  return "?";
}

struct rope_scaling {
  rope_type type = rope_type::standard;
  double theta = 10000.0;  // rope_theta
  double factor = 1.0;     // linear, dynamic, llama3, yarn
  // llama3 and yarn: original_max_position_embeddings; dynamic: max_position_embeddings (the
  // length beyond which theta grows)
  std::int64_t original_max_positions = 0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0;        // yarn
  double beta_slow = 1.0;         // yarn
  double attention_factor = 0.0;  // yarn: cos and sin are scaled by it; 0: 0.1 ln(factor) + 1
  bool truncate = true;           // yarn: the correction range is widened to whole pairs

  constexpr bool operator==(const rope_scaling&) const = default;
};

}  // namespace shardgraph
