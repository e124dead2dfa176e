#pragma once
// per_layer: which values a training step keeps once per layer of a repeat block, and which
// activation recomputation (training{.recompute}) computes again inside the backward block.
//
//   plan::recomputed(p, i);                       // forward block value i is computed again
//   plan::per_layer(p, idx, scattered_grad, i);   // value i exists once per layer
//
// Recomputed: with recompute::full every forward block value but the weights, with
// recompute::attention the attentions; they are computed again for layer l at the start of the
// backward block's iteration for l. Per layer: a block's weights (not under ZeRO-3: one gathered
// layer at a time), a training block's input (the backward reads each layer's), the forward block
// values a later phase or a recomputed step reads, and the gradients of the block's weights (not
// those a bucket reduce-scatters: their whole buffer is reused).
#include <cstddef>
#include <vector>

#include "shardgraph/plan/step_index.hpp"
#include "shardgraph/program/program.hpp"

namespace shardgraph::plan {

inline bool recomputed(const program_view& p, int i) {
  const graph_view& g = p.nodes;
  const node& n = g[i];
  if (p.recompute == recompute::none || n.kind == op::parameter || n.body() < 0 || g[n.body()].reverse)
    return false;
  return p.recompute == recompute::full || n.kind == op::attention;
}

// The steps that recomputation runs again in each backward block iteration, in order.
inline std::vector<std::size_t> recomputed_steps(const program_view& p) {
  std::vector<std::size_t> steps;
  if (!p.is_training()) return steps;
  for (std::size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].kind != step_kind::loop_begin && p.steps[s].kind != step_kind::loop_end &&
        recomputed(p, p.steps[s].node))
      steps.push_back(s);
  return steps;
}

// Whether forward block value i is read outside its block (the backward, the head) or by a step
// that activation recomputation runs again inside the backward.
inline bool read_after_its_layer(const program_view& p, const step_index& idx, int i) {
  const graph_view& g = p.nodes;
  for (int r : idx.readers[static_cast<std::size_t>(i)])
    if (g[r].region != g[i].region || recomputed(p, r)) return true;
  return false;
}

// `scattered_grad`: per node, a param_grad reduce-scattered in a bucket (empty: none is).
inline bool per_layer(const program_view& p, const step_index& idx, const std::vector<bool>& scattered_grad,
                      int i) {
  const graph_view& g = p.nodes;
  const node& n = g[i];
  if (n.kind == op::parameter) return n.region >= 0 && p.zero_stage < 3;
  if (!p.is_training()) return false;
  if (n.kind == op::param_grad) {
    const bool scattered = !scattered_grad.empty() && scattered_grad[static_cast<std::size_t>(i)];
    return g[n.origin].region >= 0 && !scattered;
  }
  if (n.kind == op::repeat_begin) return !n.reverse;
  return n.body() >= 0 && !g[n.body()].reverse && !recomputed(p, i) && read_after_its_layer(p, idx, i);
}

}  // namespace shardgraph::plan
