#pragma once
// Scaled dot-product attention, causal or not, with an optional padding mask or segment ids
// (ir/attention_masking.hpp), and grouped-query heads (GQA; MHA when kv_heads == heads, MQA when
// kv_heads == 1), and keys of their own length (cross-attention, not causal). Per (batch, head)
// it forms the full (seq, keys) score matrix in a scratch buffer: simple and exact, O(seq keys)
// memory per head, fine for the reference backend.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "shardgraph/cpu/attention_weights.hpp"
#include "shardgraph/cpu/checks.hpp"
#include "shardgraph/cpu/gemm.hpp"
#include "shardgraph/cpu/softmax.hpp"

namespace shardgraph::cpu {

// q (batch, heads, seq, head_dim); k, v (batch, kv_heads, keys, head_dim).
struct attention_sizes {
  std::int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0, keys = 0;
};

namespace detail {
// The sizes causal_attention and its gradient share: all non-negative, heads a multiple of kv_heads,
// keys as many as queries under causal.
inline void check_attention_sizes(const char* where, const attention_sizes& s, bool causal) {
  const auto [batch, heads, kv_heads, seq, head_dim, keys] = s;
  check_size(where, "keys", keys);
  if (causal && keys != seq)
    fail(where, "a causal attention over " + std::to_string(keys) + " keys for " + std::to_string(seq) + " queries",
         "causal attention needs queries and keys of one length; a cross-attention is not causal");
  check_size(where, "batch", batch);
  check_size(where, "heads", heads);
  check_size(where, "kv_heads", kv_heads);
  check_size(where, "seq", seq);
  check_size(where, "head_dim", head_dim);
  if (heads > 0 && (kv_heads == 0 || heads % kv_heads != 0)) {
    fail(where,
         "heads (" + std::to_string(heads) + ") is not a multiple of kv_heads (" + std::to_string(kv_heads) +
             ")",
         "each kv head must serve the same number of query heads; with tensor parallelism shard both by the "
         "same tp");
  }
}
}  // namespace detail

// q (batch, heads, seq, head_dim); k, v (batch, kv_heads, keys, head_dim); out (batch, heads, seq,
// head_dim). Query head h reads kv head h / (heads / kv_heads), as HF repeat_kv. Token i attends to
// the keys `seen` lets it see (key_visibility: causal, a padding mask (batch, keys), segment ids); a
// token that sees no key gets 0. The scores are scaled by `scale`, 0 meaning 1 / sqrt(head_dim). out
// must not overlap q, k or v. `where` names the caller in errors.
template <class T>
void scaled_dot_product_attention(const T* q, const T* k, const T* v, T* out, const attention_sizes& s,
                                  double scale_or_zero, const key_visibility& seen,
                                  const char* where = "cpu::scaled_dot_product_attention") {
  detail::check_attention_sizes(where, s, seen.masking.causal);
  const auto [batch, heads, kv_heads, seq, head_dim, keys] = s;
  detail::check_pointer(where, "q", q, batch * heads * seq * head_dim);
  detail::check_pointer(where, "k", k, batch * kv_heads * keys * head_dim);
  detail::check_pointer(where, "v", v, batch * kv_heads * keys * head_dim);
  detail::check_pointer(where, "out", out, batch * heads * seq * head_dim);
  if (seen.masking.mask != attention_mask::none) detail::check_pointer(where, "mask", seen.mask, batch * keys);
  if (batch == 0 || heads == 0 || seq == 0 || head_dim == 0) return;

  using const_map = Eigen::Map<const row_major_matrix<T>>;
  const std::int64_t group = heads / kv_heads;
  const T scale = T(scale_or_zero != 0.0 ? scale_or_zero : 1 / std::sqrt(double(head_dim)));
  row_major_matrix<T> scores(seq, keys);  // (seq, keys) scores, then weights, of one head

  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t kv_h = h / group;
      const_map q_matrix(q + (b * heads + h) * seq * head_dim, seq, head_dim);
      const_map k_matrix(k + (b * kv_heads + kv_h) * keys * head_dim, keys, head_dim);
      const_map v_matrix(v + (b * kv_heads + kv_h) * keys * head_dim, keys, head_dim);
      Eigen::Map<row_major_matrix<T>> out_matrix(out + (b * heads + h) * seq * head_dim, seq, head_dim);

      // The full product is faster in Eigen than its lower triangle alone; under causal the upper
      // (future) triangle is computed but never read.
      scores.noalias() = q_matrix * k_matrix.transpose();
      attention_weights(scores.data(), b, seq, keys, scale, seen);
      if (seen.masking.causal)
        out_matrix.noalias() = scores.template triangularView<Eigen::Lower>() * v_matrix;
      else  // (through gemm: the products every model instantiates anyway)
        gemm(scores.data(), v_matrix.data(), out_matrix.data(), seq, keys, head_dim, false);
    }
  }
}

// scaled_dot_product_attention of queries and keys of one length.
template <class T>
void scaled_dot_product_attention(const T* q, const T* k, const T* v, T* out, std::int64_t batch, std::int64_t heads,
                                  std::int64_t kv_heads, std::int64_t seq, std::int64_t head_dim,
                                  double scale_or_zero, const key_visibility& seen,
                                  const char* where = "cpu::scaled_dot_product_attention") {
  scaled_dot_product_attention(q, k, v, out, {batch, heads, kv_heads, seq, head_dim, seq}, scale_or_zero, seen,
                               where);
}

// scaled_dot_product_attention with the causal mask alone.
template <class T>
void causal_attention(const T* q, const T* k, const T* v, T* out, std::int64_t batch, std::int64_t heads,
                      std::int64_t kv_heads, std::int64_t seq, std::int64_t head_dim,
                      double scale_or_zero = 0.0) {
  scaled_dot_product_attention(q, k, v, out, batch, heads, kv_heads, seq, head_dim, scale_or_zero, key_visibility{},
                               "cpu::causal_attention");
}

}  // namespace shardgraph::cpu
