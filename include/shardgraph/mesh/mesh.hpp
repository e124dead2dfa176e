#pragma once
// A device mesh with named axes. Names are fixed at compile time (`mesh<"dp", "tp">`), sizes at
// run time (`mesh_shape`, given to bind). Rank r has coordinates in row-major order over the axes,
// the last axis fastest, so with mesh<"dp", "tp"> the tp groups are runs of consecutive ranks
// (as in Megatron-LM).
#include <cstddef>
#include <string_view>

#include "shardgraph/core/fixed_string.hpp"
#include "shardgraph/core/static_vector.hpp"

namespace shardgraph {

inline constexpr std::size_t max_mesh_axes = 4;

// The axis names of a mesh as a plain value, carried by every graph.
struct mesh_axes {
  static_vector<name_buffer, max_mesh_axes> names;

  constexpr int size() const { return static_cast<int>(names.size()); }
  constexpr int index_of(std::string_view axis) const {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i].view() == axis) return static_cast<int>(i);
    return -1;
  }
  constexpr std::string_view name(int i) const { return names[static_cast<std::size_t>(i)].view(); }
  friend constexpr bool operator==(const mesh_axes&, const mesh_axes&) = default;
};

template <fixed_string... Axes>
struct mesh {
  static_assert(sizeof...(Axes) >= 1, "shardgraph: mesh: a mesh needs at least one axis. write mesh<\"dp\"> for plain data parallelism");
  static_assert(sizeof...(Axes) <= max_mesh_axes, "shardgraph: mesh: more than 4 axes. combine axes or raise max_mesh_axes");

  static constexpr mesh_axes axes() {
    mesh_axes result;
    (result.names.push_back(name_buffer(Axes.view())), ...);
    for (int i = 0; i < result.size(); ++i)
      for (int j = i + 1; j < result.size(); ++j)
        if (result.name(i) == result.name(j)) constexpr_fail("shardgraph: mesh: two axes have the same name. give every axis its own name");
    return result;
  }
};

}  // namespace shardgraph
