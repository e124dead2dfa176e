#pragma once
// Step fusion: the cross-entropy's gradient reading the statistics its loss kept
// (fused::cross_entropy_saved), or written by the loss's call (fused::loss_with_gradient),
// run in this order; the second supersedes the first.
#include "shardgraph/plan/step_fusion_state.hpp"

namespace shardgraph::plan::detail {

// fused::cross_entropy_saved: the cross-entropy gradient reads the rows'
// log-sum-exp that the loss's call kept with the logits (output_kept; the gradient's side is the
// loss) instead of computing it again in a pass over the logits. Every value is written once, so the
// logits are unchanged in between. A vocabulary-parallel gradient reads its rows' statistics already
// (its lse operand).
inline void plan_cross_entropy_statistics(fusion_state& s) {
  if (!s.introduces(compute::fused::cross_entropy_saved)) return;
  const graph_view& g = s.nodes();
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::cross_entropy_grad || g[i].vocab_axis >= 0) continue;
    for (int f : s.readers(g[i].inputs[0]))
      if (g[f].kind == op::cross_entropy && g[f].inputs[1] == g[i].inputs[1]) {
        s.plan.forward_output_of[at(i)] = f;
        s.plan.output_kept[at(f)] = true;
      }
  }
}

// Whether cross_entropy f's call can also write the logits' gradient i: the same logits and targets,
// computed alone in one region, not recomputed, f's step at or before i's, f not paired yet.
inline bool loss_writes_gradient_of(const fusion_state& s, int f, int i) {
  const graph_view& g = s.nodes();
  return g[f].kind == op::cross_entropy && g[f].inputs[1] == g[i].inputs[1] && s.computed_alone(f) &&
         g[f].region == g[i].region && !s.in.recomputed[at(f)] && s.plan.logits_grad_of[at(f)] < 0 &&
         s.step_of(f) != step_index::no_step && s.step_of(f) <= s.step_of(i);
}

// fused::loss_with_gradient: the loss's call also writes the logits'
// gradient, for a gradient whose loss gradient is the backward's seed (op::ones). One read of each
// row makes both, and the gradient's step is skipped; nothing in between writes the logits or the
// targets (every value is written once). The gradient's lifetime starts at the loss's step (the
// memory plan), where it may take the logits' memory. It supersedes the kept statistics. The seed is
// 1 but under a loss scale; then the two steps run apart (step_fusion::runs), the gradient's
// computing the rows' statistics again. Pipelines interleave micro-batches between a loss and its
// gradient, and recomputed or per-layer values are not planned.
inline void plan_cross_entropy_gradient_with_loss(fusion_state& s) {
  if (!s.introduces(compute::fused::loss_with_gradient) || s.in.pipelined) return;
  const graph_view& g = s.nodes();
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::cross_entropy_grad || !s.computed_alone(i) || g[i].input_count != 3) continue;
    if (g[g[i].inputs[2]].kind != op::ones) continue;
    const int logits = g[i].inputs[0];
    if (g[i].type != g[logits].type || s.in.recomputed[at(i)] || s.in.kept_per_layer[at(i)]) continue;
    for (int f : s.readers(logits)) {
      if (!loss_writes_gradient_of(s, f, i)) continue;
      s.plan.logits_grad_of[at(f)] = i;
      s.plan.output_kept[at(f)] = false;
      s.plan.forward_output_of[at(i)] = -1;
      s.take_over(i, f, s.step_of(f));
      break;
    }
  }
}

}  // namespace shardgraph::plan::detail
