#pragma once
// The order of a permute kernel call (kernel_call::dims[4] of op::permute): which dimension of x
// each dimension of the result is, two bits per dimension. x is padded in front with dimensions of
// size 1 to rank 4, so the order always names four dimensions.
//
//   permute_order({2, 0, 1, 3}) == 0b11'01'00'10;   permuted_from(that, 0) == 2
#include <array>
#include <cstdint>

namespace shardgraph::compute {

inline constexpr int permute_rank = 4;

// from[k]: the dimension of x that is the result's dimension k (a permutation of 0..3).
constexpr std::int64_t permute_order(const std::array<int, permute_rank>& from) {
  std::int64_t order = 0;
  for (int k = 0; k < permute_rank; ++k) order |= static_cast<std::int64_t>(from[k]) << (2 * k);
  return order;
}
constexpr int permuted_from(std::int64_t order, int k) { return static_cast<int>((order >> (2 * k)) & 3); }

static_assert(permute_order({2, 0, 1, 3}) == 0b11'01'00'10 && permuted_from(0b11'01'00'10, 0) == 2);

}  // namespace shardgraph::compute
