#pragma once
// The kernels of a generation program (passes/attach_kv_cache.hpp), on one rank's slices:
//
//   kv_context (batch, table) i32: row b = [L_b, block ids...]; L_b tokens are in b's cache after
//     this step, so this step's token t sits at position p = L_b - seq + t.
//   cache (blocks, kv_heads, 2 * block_tokens, head_dim): position p of row b lives in block
//     kv_context[b][1 + p / block_tokens], row p % block_tokens (keys) and block_tokens + that (values).
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

#include "shardgraph/core/error.hpp"

namespace shardgraph::cpu {

struct cached_attention_sizes {
  std::int64_t batch, heads, kv_heads, seq, head_dim, block_tokens, blocks, table;
};

// Position of row b's first token in this step; fails where the row's context cannot hold it.
inline std::int64_t first_position(const std::int32_t* context, std::int64_t b, std::int64_t seq,
                                   std::int64_t table, std::int64_t block_tokens, const char* where) {
  const std::int64_t length = context[b * table];
  if (length < seq)
    fail(where,
         "row " + std::to_string(b) + " of kv_context says " + std::to_string(length) +
             " tokens are cached after this step, fewer than the step's " + std::to_string(seq),
         "set kv_context[b][0] to the tokens cached before the step plus the step's length");
  if ((length + block_tokens - 1) / block_tokens > table - 1)
    fail(where,
         "row " + std::to_string(b) + " needs " + std::to_string((length + block_tokens - 1) / block_tokens) +
             " cache blocks for " + std::to_string(length) + " tokens, but kv_context has " +
             std::to_string(table - 1) + " block columns",
         "bind with a larger kv_table (1 + the blocks of the longest sequence)");
  return length - seq;
}

// Where position p of row b starts in the cache: the key row's offset (the value row is
// block_tokens * head_dim further).
inline std::int64_t cache_row(const std::int32_t* context, const cached_attention_sizes& s, std::int64_t b,
                              std::int64_t head, std::int64_t p, const char* where) {
  const std::int64_t block = context[b * s.table + 1 + p / s.block_tokens];
  if (block < 0 || block >= s.blocks)
    fail(where,
         "row " + std::to_string(b) + " names cache block " + std::to_string(block) + ", but this rank holds " +
             std::to_string(s.blocks),
         "give block ids in [0, kv_blocks / data-parallel ranks), local to the rank's pool");
  return ((block * s.kv_heads + head) * 2 * s.block_tokens + p % s.block_tokens) * s.head_dim;
}

template <class T>
void cached_attention(const T* q, const T* k, const T* v, T* cache, const std::int32_t* context, T* out,
                      const cached_attention_sizes& s, double scale) {
  const char* where = "cpu::cached_attention";
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    fail(where, std::to_string(s.heads) + " query heads are not a multiple of " + std::to_string(s.kv_heads) + " kv heads",
         "choose heads a multiple of kv_heads");
  const std::int64_t group = s.heads / s.kv_heads, value_offset = s.block_tokens * s.head_dim;
  std::vector<double> weights;
  std::vector<std::int64_t> rows;  // each cached position's key row
  for (std::int64_t b = 0; b < s.batch; ++b) {
    const std::int64_t start = first_position(context, b, s.seq, s.table, s.block_tokens, where);
    for (std::int64_t h = 0; h < s.kv_heads; ++h)
      for (std::int64_t t = 0; t < s.seq; ++t) {
        const std::int64_t from = ((b * s.kv_heads + h) * s.seq + t) * s.head_dim;
        T* row = cache + cache_row(context, s, b, h, start + t, where);
        std::copy(k + from, k + from + s.head_dim, row);
        std::copy(v + from, v + from + s.head_dim, row + value_offset);
      }
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t t = 0; t < s.seq; ++t) {
        const std::int64_t keys = start + t + 1;
        const T* query = q + ((b * s.heads + h) * s.seq + t) * s.head_dim;
        weights.assign(static_cast<std::size_t>(keys), 0.0);
        rows.resize(static_cast<std::size_t>(keys));
        for (std::int64_t j = 0; j < keys; ++j) rows[static_cast<std::size_t>(j)] = cache_row(context, s, b, h / group, j, where);
        double largest = -INFINITY;
        for (std::int64_t j = 0; j < keys; ++j) {
          const T* key = cache + rows[static_cast<std::size_t>(j)];
          double dot = 0;
          for (std::int64_t e = 0; e < s.head_dim; ++e) dot += double(query[e]) * double(key[e]);
          weights[static_cast<std::size_t>(j)] = dot * scale;
          largest = std::max(largest, dot * scale);
        }
        double total = 0;
        for (double& w : weights) total += (w = std::exp(w - largest));
        T* result = out + ((b * s.heads + h) * s.seq + t) * s.head_dim;
        for (std::int64_t e = 0; e < s.head_dim; ++e) {
          double sum = 0;
          for (std::int64_t j = 0; j < keys; ++j)
            sum += weights[static_cast<std::size_t>(j)] *
                   double(cache[rows[static_cast<std::size_t>(j)] + value_offset + e]);
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
    offsets[static_cast<std::size_t>(b)] = context[b * table] - seq;
    if (offsets[static_cast<std::size_t>(b)] < 0)
      fail(where,
           "row " + std::to_string(b) + " of kv_context says " + std::to_string(context[b * table]) +
               " tokens are cached after this step, fewer than the step's " + std::to_string(seq),
           "set kv_context[b][0] to the tokens cached before the step plus the step's length");
  }
  return offsets;
}

}  // namespace shardgraph::cpu
