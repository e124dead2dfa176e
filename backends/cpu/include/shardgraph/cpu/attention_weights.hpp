#pragma once
// The attention weights of one (batch, head): which keys each query sees (key_visibility, as
// ir/attention_masking.hpp states it) and the softmax over the seen keys' scaled scores.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/softmax.hpp"
#include "shardgraph/ir/attention_masking.hpp"

namespace shardgraph::cpu {

// Which keys query i of batch row b sees: causal (j <= i), and with a mask (batch, keys) of
// padding (mask[b][j] != 0) or segment ids (mask[b][i] == mask[b][j]; queries and keys of one length).
struct key_visibility {
  attention_masking masking;
  const std::int64_t* mask = nullptr;  // (batch, keys); read only when masking.mask is not none

  bool sees(std::int64_t b, std::int64_t keys, std::int64_t i, std::int64_t j) const {
    if (masking.causal && j > i) return false;
    const std::int64_t* row = mask + b * keys;
    switch (masking.mask) {
      case attention_mask::padding: return row[j] != 0;
      case attention_mask::segments: return row[i] == row[j];
      default: return true;
    }
  }
};

// scores (seq, keys) of batch row b, q k^T, become the weights P in place: row i is the softmax of
// scale * scores over the keys query i sees, and 0 at the keys it does not see (a row that sees no
// key is all 0). With causal (keys == seq), the entries j > i are left as they are and never read:
// the caller multiplies by the lower triangle only.
template <class T>
void attention_weights(T* scores, std::int64_t b, std::int64_t seq, std::int64_t keys, T scale,
                       const key_visibility& seen) {
  for (std::int64_t i = 0; i < seq; ++i) {
    T* row = scores + i * keys;
    const std::int64_t end = seen.masking.causal ? i + 1 : keys;
    if (seen.masking.mask == attention_mask::none) {
      for (std::int64_t j = 0; j < end; ++j) row[j] *= scale;
      softmax_row(row, row, end);
      continue;
    }
    T row_max = -std::numeric_limits<T>::infinity();
    for (std::int64_t j = 0; j < end; ++j)
      if (seen.sees(b, keys, i, j)) row_max = std::max(row_max, row[j] * scale);
    accumulator_t<T> sum = 0;
    for (std::int64_t j = 0; j < end; ++j) {
      row[j] = seen.sees(b, keys, i, j) ? std::exp(row[j] * scale - row_max) : T(0);
      sum += row[j];
    }
    const T inverse_sum = sum > 0 ? T(1 / sum) : T(0);
    for (std::int64_t j = 0; j < end; ++j) row[j] *= inverse_sum;
  }
}

}  // namespace shardgraph::cpu
