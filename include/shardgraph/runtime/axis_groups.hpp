#pragma once
// axis_groups: a rank's communicators, split from the world's at bind, and its communication
// threads.
//
//   std::vector<int> at = mesh_coordinates(p, mesh, world);        // checks the rank count first
//   std::vector<Comm> axes = split_axes(world, axis_sizes, at);   // one group per mesh axis
//   Comm tied = split_tied_group(axes[pp], stages, at[pp]);       // first and last pipeline stage
//   auto workers = start_comm_workers(axes, used);                 // a thread per axis in use
//
// Every split is collective over the group split, so every rank of it makes the same calls in the
// same order.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shardgraph/comm/comm_worker.hpp"
#include "shardgraph/comm/communicator.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/mesh/mesh_shape.hpp"
#include "shardgraph/program/program.hpp"

namespace shardgraph {

// This rank's coordinate on each mesh axis of program p; fails on every rank when the world's ranks
// are not the mesh's.
template <comm::Communicator Comm>
std::vector<int> mesh_coordinates(const program_view& p, const mesh_shape& mesh, Comm& world) {
  const int needed = mesh.world_size(p.nodes.axes);
  if (needed != world.size())
    fail("bind",
         "the communicator has " + std::to_string(world.size()) + " ranks but mesh " + mesh.to_string() +
             " needs " + std::to_string(needed),
         "start " + std::to_string(needed) + " ranks, or choose mesh sizes whose product is " +
             std::to_string(world.size()));
  return mesh.coordinates(p.nodes.axes, world.rank());
}

// One communicator per mesh axis: the ranks that differ only in that axis's coordinate, ranked by it.
template <comm::Communicator Comm>
std::vector<Comm> split_axes(Comm& world, std::span<const int> axis_sizes, std::span<const int> coordinates) {
  std::vector<Comm> axes;
  for (std::size_t a = 0; a < axis_sizes.size(); ++a) {
    int color = 0;
    for (std::size_t b = 0; b < axis_sizes.size(); ++b)
      if (b != a) color = color * axis_sizes[b] + coordinates[b];
    axes.push_back(world.split(color, coordinates[a]));
  }
  return axes;
}

// The ranks of the first and the last of `stages` pipeline stages, which both hold the weights tied
// to the embedding (a rank of another stage gets a group it never uses).
template <comm::Communicator Comm>
Comm split_tied_group(Comm& pipeline_axis, int stages, int coordinate) {
  const bool member = coordinate == 0 || coordinate == stages - 1;
  return pipeline_axis.split(member ? 0 : 1, coordinate);
}

// Whether collectives may run on communication threads: `asked` (training{.overlap_communication})
// and the communicator lets two groups of a rank be called at once.
template <comm::Communicator Comm>
bool communication_threads(const std::vector<Comm>& axes, bool asked) {
  bool concurrent = false;
  if constexpr (comm::ConcurrentGroups<Comm>)
    concurrent = !axes.empty() && axes.front().allows_concurrent_groups();
  return concurrent && asked;
}

// A communication thread for each axis `used` marks, each with a communicator of its own (split from
// the axis's: collective over its ranks, which plan the same); null for the others.
template <comm::Communicator Comm>
std::vector<std::unique_ptr<comm::comm_worker<Comm>>> start_comm_workers(std::vector<Comm>& axes,
                                                                         const std::vector<bool>& used) {
  std::vector<std::unique_ptr<comm::comm_worker<Comm>>> workers(axes.size());
  for (std::size_t a = 0; a < axes.size(); ++a)
    if (used[a]) workers[a] = std::make_unique<comm::comm_worker<Comm>>(axes[a].split(0, axes[a].rank()));
  return workers;
}

}  // namespace shardgraph
