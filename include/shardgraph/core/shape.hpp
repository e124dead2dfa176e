#pragma once
// A symbolic shape: up to four extents, outermost first (row-major), e.g. (batch, seq, model).
#include <cstddef>
#include <initializer_list>

#include "shardgraph/core/extent.hpp"
#include "shardgraph/core/static_vector.hpp"

namespace shardgraph {

inline constexpr std::size_t max_rank = 4;

struct shape {
  static_vector<extent, max_rank> dims;

  constexpr shape() = default;
  constexpr shape(std::initializer_list<extent> list) {
    for (extent e : list) dims.push_back(e);
  }
  constexpr int rank() const { return static_cast<int>(dims.size()); }
  constexpr extent operator[](int i) const { return dims[static_cast<std::size_t>(i)]; }
  constexpr extent& operator[](int i) { return dims[static_cast<std::size_t>(i)]; }
  constexpr extent last() const { return dims.back(); }
  friend constexpr bool operator==(const shape&, const shape&) = default;
};

}  // namespace shardgraph
