#pragma once
// cached_attention on the cuda backend (kernels/cached_attention.cuh): the step's keys and values
// written into the cache, then one warp per query over the cached positions. dims {batch, heads,
// kv_heads, seq, head_dim, block_tokens}; in[3] the cache (written in place), in[4] kv_context,
// checked on the host before the step (runtime/kv_cache.hpp).
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/cached_attention.cuh>
#include <shardgraph/cuda/tensor_buffer.hpp>

#include <cstdint>
#include <string>

namespace shardgraph::cuda::detail {

template <class C, class I>
void cached_attention(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  const char* where = "cuda::backend: cached_attention";
  if (d[4] > kernels::cached_attention_lanes * kernels::cached_attention_max_per_lane)
    fail(where, "head_dim " + std::to_string(d[4]) + " is above the 512 a warp per query holds",
         "use a head_dim of at most 512");
  if (d[2] <= 0 || d[1] % d[2] != 0)
    fail(where, std::to_string(d[1]) + " query heads are not a multiple of " + std::to_string(d[2]) + " kv heads",
         "choose heads a multiple of kv_heads");
  if (c.in[4] == nullptr || c.in[4]->type() != dtype::i32)
    fail(where, "the call's kv_context input is missing or not i32", "pass kv_context (batch, 1 + blocks) i32");
  const auto* context = static_cast<const std::int32_t*>(c.in[4]->data());
  const kernels::cache_shape shape{d[1], d[2], d[3], d[4], d[5], c.in[4]->numel() / d[0]};
  // The cache is the plan's buffer that this call updates: an input written in place.
  tensor_buffer& cache = const_cast<tensor_buffer&>(*c.in[3]);
  const std::int64_t kv_numel = d[0] * d[2] * d[3] * d[4];
  kernels::cache_write_kernel<C, I><<<kernels::blocks_for(kv_numel, 256), 256, 0, s.stream>>>(
      in(c, 1), in(c, 2), out(cache), context, shape, kv_numel);
  const auto queries = static_cast<unsigned>(d[0] * d[1] * d[3]);
  kernels::cached_attention_kernel<C, I><<<queries, kernels::cached_attention_lanes, 0, s.stream>>>(
      in(c, 0), in(cache), out(*c.out), context, shape, compute::attention_scale(c.scalar, d[4]));
}

}  // namespace shardgraph::cuda::detail
