#pragma once
// plan_held_parameters: the parameter slices this rank holds, in the order bind loads them and
// for_each_parameter visits them, and their bytes (what a load's progress counts).
//
// Every parameter this rank holds (plan/pipeline_stages.hpp: a stage holds its own layers' block
// weights and the weights outside the block that its phases read), a block weight once per layer.
//
//   parameters: wte (vocab, model), block weight h.w (model, model) over 3 layers, one stage:
//   slices = [{wte, -1}, {h.w, 0}, {h.w, 1}, {h.w, 2}]
#include <cstddef>
#include <cstdint>
#include <vector>

#include "shardgraph/plan/pipeline_stages.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph::plan {

struct held_parameter {
  int node = -1;
  std::int64_t layer = -1;  // -1: not a block weight
};

struct held_parameters {
  std::vector<held_parameter> slices;  // in node order, a block weight's layers in order
  std::uint64_t bytes = 0;             // of every slice (this rank's share of the weights)
};

inline held_parameters plan_held_parameters(const graph_view& g, const local_layout& layout, std::int64_t layers,
                                            const pipeline_stages& stages) {
  held_parameters held;
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::parameter) continue;
    const std::uint64_t bytes = static_cast<std::uint64_t>(layout.of(i).numel()) * dtype_size(g[i].type);
    const bool block_weight = g[i].region >= 0;
    for (std::int64_t l = 0; l < (block_weight ? layers : 1); ++l)
      if (stages.holds(i, l)) held.slices.push_back({i, block_weight ? l : -1}), held.bytes += bytes;
  }
  return held;
}

}  // namespace shardgraph::plan
