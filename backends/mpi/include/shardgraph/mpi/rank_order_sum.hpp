#pragma once
// The deterministic sum behind all_reduce and reduce_scatter.
//
// contributions: (ranks, n), rank r's addends at offset r*n; out: (n).
// out[e] = ((c_0[e] + c_1[e]) + c_2[e]) + ... + c_{ranks-1}[e], the order the Communicator contract
// fixes, so every backend gives the same bits. The sum starts from c_0, not from zero, so that one
// contribution is returned unchanged (a -0.0 stays -0.0).
#include <cstddef>
#include <span>

namespace shardgraph::mpi {

template <class T>
void sum_in_rank_order(std::span<const T> contributions, std::size_t ranks, std::span<T> out) {
  const std::size_t n = out.size();
  if (ranks == 0 || n == 0) return;
  for (std::size_t e = 0; e < n; ++e) out[e] = contributions[e];
  for (std::size_t r = 1; r < ranks; ++r) {
    const T* addend = contributions.data() + r * n;
    for (std::size_t e = 0; e < n; ++e)
      out[e] = static_cast<T>(out[e] + addend[e]);  // small integers promote
  }
}

}  // namespace shardgraph::mpi
