#pragma once
// A generation program's attention over its KV cache (passes/attach_kv_cache.hpp), as
// cpu/cached_attention.hpp computes it; the cache (blocks, kv_heads, 2 block_tokens, head_dim) and
// kv_context (batch, width) i32 laid out as compute/kv_context.hpp says, checked on the host.
//   cache_write_kernel:      k, v (batch, kv_heads, seq, head_dim) -> the cache rows of their positions
//   cached_attention_kernel: out[b, h, t] = softmax_j(scale q[b, h, t] . K_j) V_j, j <= position of t
#include <shardgraph/cuda/kernels/element_access.cuh>

#include <cuda_runtime.h>

#include <cstdint>

namespace shardgraph::cuda::kernels {

struct cache_shape {
  std::int64_t heads, kv_heads, seq, head_dim, block_tokens, width;  // width: kv_context's columns
};

// The offset of position p's key row for row b and kv head h (values: block_tokens rows further).
template <class I>
__device__ __forceinline__ I cache_row(const std::int32_t* context, const cache_shape& s, I b, I p, I h) {
  const I tokens = static_cast<I>(s.block_tokens);
  const I block = context[b * static_cast<I>(s.width) + 1 + p / tokens];
  return ((block * static_cast<I>(s.kv_heads) + h) * 2 * tokens + p % tokens) * static_cast<I>(s.head_dim);
}

// One thread per element of k (and of v).
template <class C, class I>
__global__ void cache_write_kernel(ref k, ref v, mut_ref cache, const std::int32_t* context, cache_shape s,
                                   std::int64_t numel) {
  const I D = static_cast<I>(s.head_dim), S = static_cast<I>(s.seq), H = static_cast<I>(s.kv_heads);
  for (I e = global_thread<I>(); e < static_cast<I>(numel); e += grid_threads<I>()) {
    const I d = e % D, t = (e / D) % S, h = (e / (D * S)) % H, b = e / (D * S * H);
    const I p = context[b * static_cast<I>(s.width)] - S + t;
    const I row = cache_row<I>(context, s, b, p, h) + d;
    store<C>(cache, row, load<C>(k, e));
    store<C>(cache, row + static_cast<I>(s.block_tokens) * D, load<C>(v, e));
  }
}

inline constexpr int cached_attention_lanes = 32;        // one warp per query
inline constexpr int cached_attention_max_per_lane = 16;  // head_dim up to 512

// One warp per query row (b, h, t), launched with batch * heads * seq blocks of one warp: lane l
// holds elements l, l + 32, ... of q and of the output; an online softmax over the cached
// positions, in double.
template <class C, class I>
__global__ void cached_attention_kernel(ref q, ref cache, mut_ref out, const std::int32_t* context, cache_shape s,
                                        double scale) {
  const I S = static_cast<I>(s.seq), H = static_cast<I>(s.heads), D = static_cast<I>(s.head_dim);
  const I query = blockIdx.x, lane = threadIdx.x;
  const I t = query % S, h = (query / S) % H, b = query / (S * H);
  const I kv_head = h / (H / static_cast<I>(s.kv_heads));
  const I position = context[b * static_cast<I>(s.width)] - S + t;
  const I value_offset = static_cast<I>(s.block_tokens) * D;
  double q_part[cached_attention_max_per_lane], sum[cached_attention_max_per_lane];
  for (int i = 0; i < cached_attention_max_per_lane; ++i) {
    const I e = lane + i * cached_attention_lanes;
    q_part[i] = e < D ? static_cast<double>(load<C>(q, query * D + e)) : 0.0;
    sum[i] = 0;
  }
  double largest = -INFINITY, total = 0;
  for (I j = 0; j <= position; ++j) {
    const I key = cache_row<I>(context, s, b, j, kv_head);
    double dot = 0;
    for (int i = 0; i < cached_attention_max_per_lane; ++i) {
      const I e = lane + i * cached_attention_lanes;
      if (e < D) dot += q_part[i] * static_cast<double>(load<C>(cache, key + e));
    }
    for (int offset = cached_attention_lanes / 2; offset > 0; offset /= 2)
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const double score = dot * scale, next = fmax(largest, score);
    const double rescale = exp(largest - next), weight = exp(score - next);
    total = total * rescale + weight;
    for (int i = 0; i < cached_attention_max_per_lane; ++i) {
      const I e = lane + i * cached_attention_lanes;
      if (e < D) sum[i] = sum[i] * rescale + weight * static_cast<double>(load<C>(cache, key + value_offset + e));
    }
    largest = next;
  }
  for (int i = 0; i < cached_attention_max_per_lane; ++i) {
    const I e = lane + i * cached_attention_lanes;
    if (e < D) store<C>(out, query * D + e, static_cast<C>(sum[i] / total));
  }
}

}  // namespace shardgraph::cuda::kernels
