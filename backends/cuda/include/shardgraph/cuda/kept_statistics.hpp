#pragma once
// Row statistics a forward call keeps for its backward (kernel_call::output_kept), by the address
// of the value they go with: flash attention's log-sum-exp with its output, cross-entropy's with
// its logits. Each is device memory of its own; making or dropping one counts as a move of memory
// (backend_state::moves), so that a recorded step that read it is known to be stale.
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/device_buffer.hpp>

#include <cstddef>

namespace shardgraph::cuda::detail {

// `bytes` of row statistics kept with the value at `key`: made when `make` (else nullptr if none
// of that size is kept).
inline void* kept_lse(backend_state& s, const void* key, std::size_t bytes, bool make) {
  const auto found = s.kept_lse.find(key);
  if (found != s.kept_lse.end() && found->second.size_bytes() == bytes) return found->second.data();
  if (!make) return nullptr;
  ++s.moves;
  device_buffer& lse = s.kept_lse[key];
  lse = device_buffer();
  lse = device_buffer(bytes);
  return lse.data();
}

// Drops the statistics kept with the value at `key`, if any (its forward keeps none this time).
inline void forget_lse(backend_state& s, const void* key) {
  if (s.kept_lse.erase(key) != 0) ++s.moves;
}

}  // namespace shardgraph::cuda::detail
