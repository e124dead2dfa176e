#pragma once
// An attention call's shape as cuda::backend's attention paths read it (dims {batch, heads,
// kv_heads, seq, head_dim, keys}, scalar: the scores' scale), the batched products of the unfused
// path, and the shapes the fused kernels take.
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/core/dtype.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/gemm.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/flash_attention.cuh>
#include <shardgraph/cuda/tensor_buffer.hpp>

#include <cstddef>
#include <cstdint>

namespace shardgraph::cuda::detail {

// Attention as batched GEMMs (attention.hpp's shapes): per (batch, kv head) the group of query
// heads it serves is one (group * seq, head_dim) matrix, so GQA needs no copies of k, v; the keys
// and values are (keys, head_dim) per kv head (keys != seq: a cross-attention).
struct attention_shape {
  std::int64_t batch, heads, kv_heads, seq, head_dim, group, products, rows;
  double scale;       // of the scores (compute::attention_scale)
  std::int64_t keys;  // the keys' length (compute::attention_keys)
};
inline attention_shape attention_of(const kernel_call& c) {
  const std::int64_t* d = c.dims;
  const std::int64_t group = d[2] > 0 ? d[1] / d[2] : 1;
  const double scale = compute::attention_scale(c.scalar, d[4]);
  return {d[0], d[1], d[2], d[3], d[4], group, d[0] * d[2], group * d[3], scale, compute::attention_keys(d)};
}
// Scores and their gradients in the inputs' dtype (16-bit products accumulate in f32 and round
// once, as PyTorch's unfused attention under autocast), halving the traffic of f32 scores.
inline dtype score_type(dtype inputs) { return inputs; }

// The three shapes of attention's batched products, one product per (batch, kv head):
// (rows, head_dim) . (keys, head_dim)^T -> (rows, keys): S = Q K^T, dP = dO V^T
inline matmul_problem scores_product(const attention_shape& a) {
  return {.m = a.rows,
          .n = a.keys,
          .k = a.head_dim,
          .transpose_b = true,
          .batch = a.products,
          .stride_a = a.rows * a.head_dim,
          .stride_b = a.keys * a.head_dim,
          .stride_c = a.rows * a.keys};
}
// (rows, keys) . (keys, head_dim) -> (rows, head_dim): O = P V, dQ = dS K
inline matmul_problem times_values_product(const attention_shape& a) {
  return {.m = a.rows,
          .n = a.head_dim,
          .k = a.keys,
          .batch = a.products,
          .stride_a = a.rows * a.keys,
          .stride_b = a.keys * a.head_dim,
          .stride_c = a.rows * a.head_dim};
}
// (rows, keys)^T . (rows, head_dim) -> (keys, head_dim): dK = dS^T Q, dV = P^T dO (summing the group)
inline matmul_problem transposed_product(const attention_shape& a) {
  return {.m = a.keys,
          .n = a.head_dim,
          .k = a.rows,
          .transpose_a = true,
          .batch = a.products,
          .stride_a = a.rows * a.keys,
          .stride_b = a.rows * a.head_dim,
          .stride_c = a.keys * a.head_dim};
}

inline kernels::flash::shape flash_shape_of(const kernel_call& c, const attention_shape& a) {
  const double scale = a.scale;
  return {.batch = static_cast<int>(a.batch),
          .heads = static_cast<int>(a.heads),
          .kv_heads = static_cast<int>(a.kv_heads),
          .seq = static_cast<int>(a.seq),
          .scale = static_cast<float>(scale),
          .scale_log2 = static_cast<float>(scale * 1.4426950408889634),
          .token_major = c.token_major};
}

// Every buffer of the call starts on 16 bytes (the fused kernels' vector loads).
inline bool aligned_operands(const kernel_call& c) {
  const auto aligned = [](const tensor_buffer* b) {
    return b == nullptr || reinterpret_cast<std::uintptr_t>(b->data()) % 16 == 0;
  };
  for (const tensor_buffer* b : c.in)
    if (!aligned(b)) return false;
  return aligned(c.out) && aligned(c.key_grad) && aligned(c.value_grad);
}

}  // namespace shardgraph::cuda::detail
