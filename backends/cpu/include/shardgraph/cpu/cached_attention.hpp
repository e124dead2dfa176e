#pragma once
// The kernels of a generation program (passes/attach_kv_cache.hpp), on one rank's slices; the
// cache (blocks, kv_heads, 2 * block_tokens, head_dim) and kv_context as compute/kv_context.hpp
// says. Token t of row b sits at position p = kv_context[b][0] - seq + t.
//
//   cached_attention: q (batch, heads, seq, head_dim), k, v (batch, kv_heads, seq, head_dim)
//     1. cache[k, v of token t] = k[b, :, t], v[b, :, t]
//     2. out[b, h, t] = softmax_j(scale q[b, h, t] . K_j) V_j over positions j <= p (causal),
//        K and V of kv head h / (heads / kv_heads)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/compute/kv_context.hpp"
#include "shardgraph/core/error.hpp"

namespace shardgraph::cpu {

struct cached_attention_sizes {
  std::int64_t batch, heads, kv_heads, seq, head_dim, block_tokens, blocks, table;
};

template <class T>
void cached_attention(const T* q, const T* k, const T* v, T* cache, const std::int32_t* context, T* out,
                      const cached_attention_sizes& s, double scale) {
  const char* where = "cpu::cached_attention";
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    fail(where, std::to_string(s.heads) + " query heads are not a multiple of " + std::to_string(s.kv_heads) + " kv heads",
         "choose heads a multiple of kv_heads");
  const std::int64_t group = s.heads / s.kv_heads, value_offset = s.block_tokens * s.head_dim;
  const std::int64_t kv_heads = s.kv_heads, dims = s.head_dim, tokens = s.block_tokens;
  compute::check_kv_context(context, {s.batch, s.seq, s.table, tokens, s.blocks}, where);
  auto row_of = [&](std::int64_t b, std::int64_t p, std::int64_t head) {
    return compute::kv_cache_row(context, s.table, b, p, head, kv_heads, tokens, dims);
  };
  std::vector<double> weights;
  std::vector<std::int64_t> rows;  // each cached position's key row
  for (std::int64_t b = 0; b < s.batch; ++b) {
    const std::int64_t start = compute::kv_first_position(context, b, s.seq, s.table);
    for (std::int64_t h = 0; h < kv_heads; ++h)
      for (std::int64_t t = 0; t < s.seq; ++t) {
        const std::int64_t from = ((b * kv_heads + h) * s.seq + t) * dims;
        T* row = cache + row_of(b, start + t, h);
        std::copy(k + from, k + from + dims, row);
        std::copy(v + from, v + from + dims, row + value_offset);
      }
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t t = 0; t < s.seq; ++t) {
        const std::int64_t keys = start + t + 1;
        const T* query = q + ((b * s.heads + h) * s.seq + t) * dims;
        weights.assign(static_cast<std::size_t>(keys), 0.0);
        rows.resize(static_cast<std::size_t>(keys));
        for (std::int64_t j = 0; j < keys; ++j) rows[static_cast<std::size_t>(j)] = row_of(b, j, h / group);
        double largest = -INFINITY;
        for (std::int64_t j = 0; j < keys; ++j) {
          const T* key = cache + rows[static_cast<std::size_t>(j)];
          double dot = 0;
          for (std::int64_t e = 0; e < dims; ++e) dot += double(query[e]) * double(key[e]);
          weights[static_cast<std::size_t>(j)] = dot * scale;
          largest = std::max(largest, dot * scale);
        }
        double total = 0;
        for (double& w : weights) total += (w = std::exp(w - largest));
        T* result = out + ((b * s.heads + h) * s.seq + t) * dims;
        for (std::int64_t e = 0; e < dims; ++e) {
          double sum = 0;
          for (std::int64_t j = 0; j < keys; ++j)
            sum += weights[static_cast<std::size_t>(j)] * double(cache[rows[static_cast<std::size_t>(j)] + value_offset + e]);
          result[e] = T(sum / total);
        }
      }
  }
}

// Row b's tokens' first position, L_b - seq, per row (the rope's and position embedding's offset).
inline std::vector<std::int64_t> context_offsets(const std::int32_t* context, std::int64_t batch, std::int64_t seq,
                                                 std::int64_t table, const char* where) {
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b) {
    offsets[static_cast<std::size_t>(b)] = compute::kv_first_position(context, b, seq, table);
    if (offsets[static_cast<std::size_t>(b)] < 0)
      fail(where,
           "row " + std::to_string(b) + " of kv_context says " + std::to_string(context[b * table]) +
               " tokens are cached after this step, fewer than the step's " + std::to_string(seq),
           "set kv_context[b][0] to the tokens cached before the step plus the step's length");
  }
  return offsets;
}

}  // namespace shardgraph::cpu
