#pragma once
// Gradient of scaled_dot_product_attention (attention.hpp). Per (batch, head) it recomputes the
// (seq, seq) attention weights P from q and k, as the forward does, so it needs only the forward's
// inputs:
//   S = q k^T * scale,  P = softmax(S) per row over the keys seen (0 elsewhere),  out = P v
//   dv += P^T dout        dP = dout v^T
//   dS = P * (dP - rowsum(dP * P)) * scale        (the softmax gradient, and the scale)
//   dq = dS k             dk += dS^T q
// A kv head serves heads / kv_heads query heads, so dk and dv sum over that group. Exact and
// O(seq^2) memory per head, as the forward; the row sums accumulate in accumulator_t<T>.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include <Eigen/Core>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/attention.hpp"
#include "shardgraph/cpu/attention_weights.hpp"
#include "shardgraph/cpu/backward/gemm_backward.hpp"
#include "shardgraph/cpu/checks.hpp"
#include "shardgraph/cpu/gemm.hpp"
#include "shardgraph/cpu/softmax.hpp"

namespace shardgraph::cpu {

// q, dout, dq (batch, heads, seq, head_dim); k, v, dk, dv (batch, kv_heads, keys, head_dim); the
// sizes, the keys each query sees (`seen`), scale (0: 1 / sqrt(head_dim)) and head grouping (query
// head h reads kv head h / (heads / kv_heads)) are those of scaled_dot_product_attention. dq, dk and
// dv are written (dk and dv hold the sum over the query heads of each group; a query that sees no
// key has dq 0 and adds nothing); none of them may overlap q, k, v, dout or each other.
template <class T>
void scaled_dot_product_attention_backward(const T* q, const T* k, const T* v, const T* dout, T* dq, T* dk,
                                           T* dv, const attention_sizes& s, double scale_or_zero,
                                           const key_visibility& seen,
                                           const char* where = "cpu::scaled_dot_product_attention_backward") {
  detail::check_attention_sizes(where, s, seen.masking.causal);
  const auto [batch, heads, kv_heads, seq, head_dim, keys] = s;
  const std::int64_t q_elements = batch * heads * seq * head_dim;
  const std::int64_t kv_elements = batch * kv_heads * keys * head_dim;
  detail::check_pointer(where, "q", q, q_elements);
  detail::check_pointer(where, "k", k, kv_elements);
  detail::check_pointer(where, "v", v, kv_elements);
  detail::check_pointer(where, "dout", dout, q_elements);
  detail::check_pointer(where, "dq", dq, q_elements);
  detail::check_pointer(where, "dk", dk, kv_elements);
  detail::check_pointer(where, "dv", dv, kv_elements);
  if (seen.masking.mask != attention_mask::none) detail::check_pointer(where, "mask", seen.mask, batch * keys);
  std::fill(dk, dk + kv_elements, T(0));
  std::fill(dv, dv + kv_elements, T(0));
  if (batch == 0 || heads == 0 || seq == 0 || head_dim == 0) return;

  using acc = accumulator_t<T>;
  using const_map = Eigen::Map<const row_major_matrix<T>>;
  using map = Eigen::Map<row_major_matrix<T>>;
  const std::int64_t group = heads / kv_heads;
  const T scale = T(scale_or_zero != 0.0 ? scale_or_zero : 1 / std::sqrt(double(head_dim)));
  // (seq, keys) of one head; under causal only the lower triangle (j <= i) is meaningful in either.
  row_major_matrix<T> weights(seq, keys);   // P
  row_major_matrix<T> gradient(seq, keys);  // dP, then dS

  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t kv_h = h / group;
      const std::int64_t q_at = (b * heads + h) * seq * head_dim;
      const std::int64_t kv_at = (b * kv_heads + kv_h) * keys * head_dim;
      const_map q_matrix(q + q_at, seq, head_dim);
      const_map k_matrix(k + kv_at, keys, head_dim);
      const_map v_matrix(v + kv_at, keys, head_dim);
      const_map dout_matrix(dout + q_at, seq, head_dim);
      map dq_matrix(dq + q_at, seq, head_dim);
      map dk_matrix(dk + kv_at, keys, head_dim);
      map dv_matrix(dv + kv_at, keys, head_dim);

      weights.noalias() = q_matrix * k_matrix.transpose();
      attention_weights(weights.data(), b, seq, keys, scale, seen);
      gradient.noalias() = dout_matrix * v_matrix.transpose();
      for (std::int64_t i = 0; i < seq; ++i) {  // P is 0 at unseen keys, so dS is too
        const std::int64_t end = seen.masking.causal ? i + 1 : keys;
        const T* p = weights.data() + i * keys;
        T* g = gradient.data() + i * keys;
        acc dot = 0;
        for (std::int64_t j = 0; j < end; ++j) dot += acc(g[j]) * acc(p[j]);
        const T dot_t = T(dot);
        for (std::int64_t j = 0; j < end; ++j) g[j] = p[j] * (g[j] - dot_t) * scale;
      }

      if (seen.masking.causal) {
        dv_matrix.noalias() += weights.template triangularView<Eigen::Lower>().transpose() * dout_matrix;
        dq_matrix.noalias() = gradient.template triangularView<Eigen::Lower>() * k_matrix;
        dk_matrix.noalias() += gradient.template triangularView<Eigen::Lower>().transpose() * q_matrix;
      } else {  // (through gemm and gemm_at_b: the products every model instantiates anyway)
        gemm_at_b(weights.data(), dout_matrix.data(), dv_matrix.data(), seq, keys, head_dim, true);
        gemm(gradient.data(), k_matrix.data(), dq_matrix.data(), seq, keys, head_dim, false);
        gemm_at_b(gradient.data(), q_matrix.data(), dk_matrix.data(), seq, keys, head_dim, true);
      }
    }
  }
}

// scaled_dot_product_attention_backward of queries and keys of one length.
template <class T>
void scaled_dot_product_attention_backward(const T* q, const T* k, const T* v, const T* dout, T* dq, T* dk,
                                           T* dv, std::int64_t batch, std::int64_t heads, std::int64_t kv_heads,
                                           std::int64_t seq, std::int64_t head_dim, double scale_or_zero,
                                           const key_visibility& seen,
                                           const char* where = "cpu::scaled_dot_product_attention_backward") {
  scaled_dot_product_attention_backward(q, k, v, dout, dq, dk, dv, {batch, heads, kv_heads, seq, head_dim, seq},
                                        scale_or_zero, seen, where);
}

// scaled_dot_product_attention_backward with the causal mask alone.
template <class T>
void causal_attention_backward(const T* q, const T* k, const T* v, const T* dout, T* dq, T* dk, T* dv,
                               std::int64_t batch, std::int64_t heads, std::int64_t kv_heads,
                               std::int64_t seq, std::int64_t head_dim, double scale_or_zero = 0.0) {
  scaled_dot_product_attention_backward(q, k, v, dout, dq, dk, dv, batch, heads, kv_heads, seq, head_dim,
                                        scale_or_zero, key_visibility{}, "cpu::causal_attention_backward");
}

}  // namespace shardgraph::cpu
