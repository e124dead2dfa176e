#pragma once
// zero3_gathers: what each rank stores of every parameter under ZeRO-3 and where the whole weights
// are all-gathered (training{.zero_stage = 3}; runtime/zero3_gathers.hpp runs it).
//
//   const plan::zero3_gathers z = plan::plan_zero3_gathers({.compiled = p, .elements = n, ...});
//   z.chunk[i];            // parameter i: ceil(n / D) elements, rank r storing elements [r * chunk, ...)
//   z.layer_weights[b];    // repeat block b's parameters, gathered when each of its layers starts
//
// Each rank of the zero axis (D ranks) stores chunk r of every parameter slice, zero-padded to the
// chunk's length. A repeat block's weights are all-gathered when their layer starts, into one of two
// buffers (layer % 2), and the next layer's into the other: the prefetch, which communication
// threads run while the layer computes. The weights outside blocks are gathered when forward()
// starts (a pipeline: once per step) and released when it ends.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "shardgraph/program/program.hpp"

namespace shardgraph::plan {

struct zero3_gathers {
  static constexpr int gathered_layers = 2;  // a block weight's buffers: the running layer and the next

  int axis = -1;                // the zero axis; -1: parameters are whole on every rank (not ZeRO-3)
  int parts = 1;                // D: the ranks on the zero axis
  std::int64_t coordinate = 0;  // r: the chunk this rank stores
  std::vector<std::int64_t>
      chunk;  // per node: a parameter's chunk, ceil(n / D) elements (0: other nodes, not ZeRO-3)
  // Per node: for a repeat_begin (forward or backward), the forward block's parameters, gathered per layer.
  std::vector<std::vector<int>> layer_weights;
  std::vector<int> unlayered;  // parameters outside blocks that this rank holds: gathered for each forward()

  bool on() const { return axis >= 0; }
  std::int64_t gathered(int node) const { return chunk[static_cast<std::size_t>(node)] * parts; }
  static int buffer_of(std::int64_t layer) { return static_cast<int>(layer % gathered_layers); }
  // Where chunk r lies in a slice of `numel` elements: [first, first + count); count < chunk at the end.
  std::int64_t chunk_first(int node, std::int64_t numel) const {
    return std::min(numel, coordinate * chunk[static_cast<std::size_t>(node)]);
  }
  std::int64_t chunk_count(int node, std::int64_t numel) const {
    const std::int64_t first = chunk_first(node, numel);
    return std::min(numel, first + chunk[static_cast<std::size_t>(node)]) - first;
  }
};

struct zero3_inputs {
  program_view compiled;
  const std::vector<std::int64_t>& elements;     // per node: the elements of its value on this rank
  const std::vector<int>& axis_sizes;            // per mesh axis: its ranks
  int zero_coordinate = 0;                       // this rank's coordinate on the program's zero axis
  std::function<bool(int, std::int64_t)> holds;  // (parameter, layer): this rank holds it (pipelines)
};

inline zero3_gathers plan_zero3_gathers(const zero3_inputs& in) {
  const graph_view& g = in.compiled.nodes;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  zero3_gathers z;
  z.chunk.assign(at(g.size()), 0);
  z.layer_weights.assign(at(g.size()), {});
  if (in.compiled.zero_stage < 3) return z;
  z.axis = in.compiled.zero_axis;
  z.parts = in.axis_sizes[at(z.axis)];
  z.coordinate = in.zero_coordinate;
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::parameter) continue;
    z.chunk[at(i)] = (in.elements[at(i)] + z.parts - 1) / z.parts;
    if (g[i].region < 0 && in.holds(i, 0)) z.unlayered.push_back(i);
  }
  for (int b = 0; b < g.size(); ++b) {
    if (g[b].kind != op::repeat_begin) continue;
    const int forward_block = g[b].reverse ? g[b].origin : b;
    for (int i = 0; i < g.size(); ++i)
      if (g[i].kind == op::parameter && g[i].region == forward_block) z.layer_weights[at(b)].push_back(i);
  }
  return z;
}

}  // namespace shardgraph::plan
