#pragma once
// Placement of a tensor on one mesh axis (DESIGN §4):
//   Replicate  every rank of the axis holds the whole tensor
//   Shard<d>   rank i holds the i-th contiguous block of dimension d
//   Partial    every rank holds an addend; the tensor is their sum
#include <cstdint>

namespace shardgraph {

enum class placement_kind : std::uint8_t { replicate, shard, partial };

struct placement {
  placement_kind kind = placement_kind::replicate;
  std::int8_t dim = 0;  // for shard: the tensor dimension; negative counts from the end until normalized

  constexpr bool is_replicate() const { return kind == placement_kind::replicate; }
  constexpr bool is_partial() const { return kind == placement_kind::partial; }
  constexpr bool is_shard() const { return kind == placement_kind::shard; }
  constexpr bool is_shard(int d) const { return kind == placement_kind::shard && dim == d; }
  friend constexpr bool operator==(const placement& a, const placement& b) {
    return a.kind == b.kind && (a.kind != placement_kind::shard || a.dim == b.dim);
  }
};

inline constexpr placement replicate{placement_kind::replicate, 0};
inline constexpr placement partial{placement_kind::partial, 0};
template <int D>
inline constexpr placement shard{placement_kind::shard, static_cast<std::int8_t>(D)};
constexpr placement shard_on(int d) { return {placement_kind::shard, static_cast<std::int8_t>(d)}; }

}  // namespace shardgraph
