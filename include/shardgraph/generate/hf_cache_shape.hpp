#pragma once
// The KV cache one rank of a HF model's generation program holds per token, for sizing its pool:
//
//   const io::hf_model m = io::open_hf_model(dir, {.type = dtype::f32, .vocab_multiple = tp});
//   kv_cache_size size = size_kv_cache(hf_cache_shape(m, mesh, 16), parse_kv_memory("1GiB"), 0);
#include <cstdint>

#include "shardgraph/generate/kv_cache_size.hpp"
#include "shardgraph/io/hf_model.hpp"
#include "shardgraph/mesh/mesh_shape.hpp"

namespace shardgraph::generate {

// Per rank: the kv heads tp leaves it (a grouped-query model with fewer kv heads than tp ranks
// keeps one, as Megatron-LM does) and the layers of the largest pp stage (the balanced split puts
// at most ceil(layers / pp) on a stage).
inline kv_cache_shape hf_cache_shape(const io::hf_model& m, const mesh_shape& mesh, std::int64_t block_tokens) {
  const io::hf_attention_sizes& a = m.attention;
  const std::int64_t tp = mesh.size("tp"), pp = mesh.size("pp");
  return {.layers = (a.layers + pp - 1) / pp,
          .local_kv_heads = a.kv_heads >= tp ? a.kv_heads / tp : 1,
          .head_dim = a.head_dim,
          .dtype_bytes = a.dtype_bytes,
          .max_positions = m.positions,
          .block_tokens = block_tokens};
}

}  // namespace shardgraph::generate
