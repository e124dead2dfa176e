#pragma once
// batch_operands: the operands of batched products (step fusion's batched_with), which must lie at
// one stride from each other for the products to run as one batched call.
//
//   const auto groups = plan::batch_operand_groups(in, written_into, carried);
//   groups[k];   // nodes holding one operand of each product of a batch, in the batch's order
//   const auto blocks = plan::plan_layer_blocks(in, m.materialized, groups);
//   blocks[k].stride;   // bytes between members in each layer's block
//
// Per batched product and operand (the weight or dy, the result, the bias or its gradient), the
// nodes holding that operand of each product form a group where they are distinct values of one
// dtype and size that could be placed together. Groups of values kept per layer (block weights,
// their gradients, kept activations) become layer blocks: one allocation per layer holding the
// members at equal strides. The others are placed together in the arena (plan/arena.hpp). A value
// in two layer blocks (a weight that the forward products and the input gradients' both batch) is
// a view into the later one's (the earlier batch's call finds its operands at one stride only where
// the two orders agree, else runs its products one by one).
#include <algorithm>
#include <cstddef>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/plan/carried_values.hpp"
#include "shardgraph/plan/memory_inputs.hpp"
#include "shardgraph/plan/memory_plan.hpp"
#include "shardgraph/plan/per_layer.hpp"

namespace shardgraph::plan {

// The node whose memory holds value v: a split or merge of heads' buffer, a parameter's gradient.
inline int memory_of(const step_fusion& fused, const std::vector<int>& written_into, int v) {
  for (;;) {
    const std::size_t at = static_cast<std::size_t>(v);
    if (fused.stored_in[at] >= 0)
      v = fused.stored_in[at];
    else if (written_into[at] >= 0)
      v = written_into[at];
    else
      return v;
  }
}

inline std::vector<std::vector<int>> batch_operand_groups(const memory_inputs& in,
                                                          const std::vector<int>& written_into,
                                                          const carried_values& carried) {
  const graph_view& g = in.program.nodes;
  const step_fusion& fused = in.fused;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  std::vector<std::vector<int>> groups;
  for (int i = 0; i < g.size(); ++i) {
    if (fused.batched_with[at(i)].empty()) continue;
    std::vector<int> products{i};
    products.insert(products.end(), fused.batched_with[at(i)].begin(), fused.batched_with[at(i)].end());
    for (int k = 0; k < 3; ++k) {
      std::vector<int> group;
      for (int p : products) {
        const bool forward = g[p].kind == op::linear;
        const int bias = forward ? fused.bias_epilogue_of[at(p)] : fused.bias_grad_of[at(p)];
        const int v = k == 0     ? g[p].inputs[1]
                      : k == 1   ? (forward && bias >= 0 ? bias : p)
                      : bias < 0 ? -1
                      : forward  ? g[bias].inputs[1]
                                 : bias;
        if (v >= 0) group.push_back(memory_of(fused, written_into, v));
      }
      bool together = group.size() == products.size();
      for (std::size_t m = 0; m < group.size() && together; ++m) {
        const int v = group[m];
        together = g[v].type == g[group[0]].type &&
                   in.layout.of(v).numel() == in.layout.of(group[0]).numel() &&
                   carried.carried_into[at(v)] < 0 && carried.carry_partner[at(v)] < 0 &&
                   std::count(group.begin(), group.end(), v) == 1;
      }
      if (together) groups.push_back(std::move(group));
    }
  }
  return groups;
}

// One group of per-layer values placed together: each layer's block holds member m at m * stride.
struct layer_block {
  std::vector<int> members;
  dtype type = dtype::f32;
  std::int64_t numel = 0;        // of each member
  std::size_t stride = 0;        // bytes: a member's, aligned (memory_plan::alignment)
  std::int64_t block_numel = 0;  // elements of `type` a layer's block holds
};

// The groups whose members are all kept per layer and written by some step (a backend with views
// only: the members are views into their layer's block).
inline std::vector<layer_block> plan_layer_blocks(const memory_inputs& in,
                                                  const std::vector<bool>& materialized,
                                                  std::vector<std::vector<int>> groups) {
  std::vector<layer_block> blocks;
  if (!in.views) return blocks;
  const graph_view& g = in.program.nodes;
  for (std::vector<int>& group : groups) {
    bool layered = true;
    for (int v : group)
      layered = layered && per_layer(in.program, in.steps, in.scattered_grad, v) &&
                materialized[static_cast<std::size_t>(v)];
    if (!layered) continue;
    layer_block b;
    b.type = g[group[0]].type;
    b.numel = in.layout.of(group[0]).numel();
    b.stride = memory_plan::aligned(checked_bytes(b.numel, dtype_size(b.type), "bind: layer blocks"));
    b.block_numel = static_cast<std::int64_t>(
        (checked_multiply_bytes(b.stride, group.size(), "bind: layer blocks") + dtype_size(b.type) - 1) /
        dtype_size(b.type));
    b.members = std::move(group);
    blocks.push_back(std::move(b));
  }
  return blocks;
}

}  // namespace shardgraph::plan
