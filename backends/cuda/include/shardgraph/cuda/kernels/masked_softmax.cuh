#pragma once
// The softmax of attention's scores under a padding mask or segment ids (ir/attention_masking.hpp),
// causal or not: the unfused attention path's forward. Its gradient is softmax_grad_kernel's
// (softmax.cuh): the weights are 0 at the keys a query does not see, so is their gradient.
#include <shardgraph/cuda/kernels/element_access.cuh>
#include <shardgraph/ir/attention_masking.hpp>

#include <cuda_runtime.h>

#include <cstdint>

namespace shardgraph::cuda::kernels {

// The mask (batch, keys) i64 and how to read it. The scores' rows are (batch, heads, seq) in order:
// row r is query r % seq of batch row r / rows_per_batch (rows_per_batch = heads * seq).
struct key_mask {
  const std::int64_t* values = nullptr;
  attention_mask kind = attention_mask::padding;
  std::int64_t rows_per_batch = 1;
};

// Whether query i sees key j of one batch row's mask `m` (keys entries; segment ids: keys == seq).
__device__ __forceinline__ bool sees_key(const std::int64_t* m, attention_mask kind, bool causal, std::int64_t i,
                                         std::int64_t j) {
  if (causal && j > i) return false;
  return kind == attention_mask::segments ? m[i] == m[j] : m[j] != 0;
}

// y = softmax(x * scale) per row of (rows, keys) over the keys the row's query sees, 0 at the others
// (a row that sees no key: all 0). A block per row; the rows are queries of seq per (batch, head).
template <class C>
__global__ void masked_softmax_kernel(ref x, mut_ref y, std::int64_t seq, std::int64_t keys, bool causal, C scale,
                                      key_mask mask) {
  const std::int64_t row = blockIdx.x, base = row * keys, i = row % seq;
  const std::int64_t* m = mask.values + (row / mask.rows_per_batch) * keys;
  C best = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x)
    if (sees_key(m, mask.kind, causal, i, j)) best = max(best, scale * load<C>(x, base + j));
  const C row_max = block_max(best);
  C s = 0;
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x)
    if (sees_key(m, mask.kind, causal, i, j)) s += exp(scale * load<C>(x, base + j) - row_max);
  const C sum = block_sum(s);
  const C inverse = sum > C(0) ? C(1) / sum : C(0);
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x)
    store<C>(y, base + j,
             sees_key(m, mask.kind, causal, i, j) ? exp(scale * load<C>(x, base + j) - row_max) * inverse : C(0));
}

}  // namespace shardgraph::cuda::kernels
