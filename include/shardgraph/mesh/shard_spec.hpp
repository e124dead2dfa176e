#pragma once
// A tensor's placement on every axis of the mesh, and the user's way of writing it:
// `on<"tp">(shard<1>)` names one axis; axes not named are Replicate.
#include <cstddef>
#include <string_view>

#include "shardgraph/core/fixed_string.hpp"
#include "shardgraph/mesh/mesh.hpp"
#include "shardgraph/mesh/placement.hpp"

namespace shardgraph {

struct shard_spec {
  placement axes[max_mesh_axes]{};

  constexpr placement& operator[](int axis) { return axes[axis]; }
  constexpr const placement& operator[](int axis) const { return axes[axis]; }
  friend constexpr bool operator==(const shard_spec& a, const shard_spec& b) {
    for (std::size_t i = 0; i < max_mesh_axes; ++i)
      if (!(a.axes[i] == b.axes[i])) return false;
    return true;
  }
};

// One user annotation: an axis name and its placement, resolved against the mesh by the builder.
struct axis_placement {
  name_buffer axis;
  placement where;
};

template <fixed_string Axis>
constexpr axis_placement on(placement p) {
  return {name_buffer(Axis.view()), p};
}

}  // namespace shardgraph
