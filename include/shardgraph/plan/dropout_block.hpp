#pragma once
// dropout_block: what bind knows of a dropout call (compute/dropout_mask.hpp): its dims, the local
// block padded in front to rank 4, and where that block lies in the whole tensor.
//
//   x (8, 6) sharded in two on dim 0, rank 1:  dims {1, 1, 4, 6}, offset {0, 0, 4, 0}, whole {1, 1, 8, 6}
#include <array>
#include <cstddef>
#include <cstdint>

#include "shardgraph/compute/dropout_mask.hpp"
#include "shardgraph/ir/node.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph::plan {

// {d0, d1, d2, d3}: the local block of value `d`, padded in front with 1s.
inline std::array<std::int64_t, 6> dropout_dims(const local_dims& d) {
  std::array<std::int64_t, 6> dims{1, 1, 1, 1, 0, 0};
  const std::size_t pad = compute::dropout_rank - d.local.size();
  for (std::size_t k = 0; k < d.local.size(); ++k) dims[pad + k] = d.local[k];
  return dims;
}

// The mask's fields of dropout node n writing value `d` (the run's step is set when it runs).
inline compute::dropout_mask dropout_mask_of(const node& n, const local_dims& d) {
  compute::dropout_mask m;
  m.seed = n.seed;
  m.layer = n.body() >= 0 ? 1 : 0;  // inside a repeat block: the runner adds the running layer
  const std::size_t pad = compute::dropout_rank - d.global.size();
  for (std::size_t k = 0; k < d.global.size(); ++k) {
    m.offset[pad + k] = d.offset[k];
    m.whole[pad + k] = d.global[k];
  }
  return m;
}

}  // namespace shardgraph::plan
