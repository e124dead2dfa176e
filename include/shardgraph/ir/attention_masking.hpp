#pragma once
// Which keys a query of an attention (and of its gradients) attends to: a node field, carried into
// the kernel call. Query i of batch row b attends to key j when all of these hold:
//   causal                   j <= i
//   mask padding             mask[b][j] != 0          (HF's attention_mask: 1 attend, 0 a padded key)
//   mask segments            mask[b][i] == mask[b][j] (segment ids: packed sequences or documents)
// `mask` (batch, seq) is an integer input of the attention, read after q, k, v (and dout). A query
// that attends to no key gives an output of 0 and no gradient (torch's SDPA gives NaN there, HF's
// eager path uniform weights).
#include <cstdint>

namespace shardgraph {

enum class attention_mask : std::uint8_t { none, padding, segments };

struct attention_masking {
  bool causal = true;
  attention_mask mask = attention_mask::none;
  constexpr bool operator==(const attention_masking&) const = default;
};

// The input index of an attention call's mask: after q, k, v (attention) or q, k, v, dout (its
// gradients).
constexpr int attention_mask_input(bool gradient) { return gradient ? 4 : 3; }

}  // namespace shardgraph
