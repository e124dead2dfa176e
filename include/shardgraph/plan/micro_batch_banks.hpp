#pragma once
// micro_batch_banks: which values of a pipeline stage exist once per micro-batch in flight.
//
//   const plan::micro_batch_banks b = plan::plan_micro_batch_banks(program, idx, stages, recomputed);
//   b.banked(i);   // node i's value has one copy per micro-batch slot (pipeline_stages::banks)
//
// A pipeline rank runs a micro-batch's forward in one action and its backward in a later one, with
// other micro-batches' actions between. A value needs a copy per micro-batch in flight when a forward
// action computes it and a later backward action of the same micro-batch reads it (the block's kept
// activations, the inputs); so do the four values that cross stages (the forward and backward
// blocks' inputs and results). A value computed and read within one action (the blocks'
// temporaries, the weight-sized gradients of the head and the embedding) lives once, as do the
// parameters and their gradients (summed over micro-batches).
//
// Actions: the block phases run in the forward and the backward action; `pre` and `post` in the
// forward; `tail` in the backward on the first stage, in the forward on the last (the tied head's
// part of a weight's gradient, from a zero input). Recomputed steps run again inside the backward
// action: what they read counts as read there, what they write as written there.
#include <cstddef>
#include <span>
#include <vector>

#include "shardgraph/plan/pipeline_stages.hpp"
#include "shardgraph/plan/step_index.hpp"
#include "shardgraph/program/program.hpp"

namespace shardgraph::plan {

struct micro_batch_banks {
  std::vector<bool> per_node;  // node -> one copy per micro-batch in flight

  bool banked(int i) const { return per_node[static_cast<std::size_t>(i)]; }
};

// `recomputed_steps`: the forward block steps run again in each backward iteration.
inline micro_batch_banks plan_micro_batch_banks(const program_view& p, const step_index& idx,
                                                const pipeline_stages& st,
                                                std::span<const std::size_t> recomputed_steps) {
  const graph_view& g = p.nodes;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  const auto is_backward = [&](phase ph) {
    return ph == phase::backward_block || (ph == phase::tail && st.holds_first);
  };
  std::vector<bool> made_forward(at(g.size()), false), read_backward(at(g.size()), false);
  std::vector<bool> rerun(p.steps.size(), false);
  for (std::size_t s : recomputed_steps) rerun[s] = true;
  for (int i = 0; i < g.size(); ++i) made_forward[at(i)] = g[i].kind == op::input;
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    const step& stp = p.steps[s];
    const bool backward = is_backward(idx.phase_of(s)) || rerun[s];
    for (int j = stp.first >= 0 ? stp.first : stp.node; j <= stp.node; ++j) {
      if (!backward) made_forward[at(j)] = true;
      if (!backward) continue;
      for (int k = 0; k < g[j].input_count; ++k) read_backward[at(g[j].inputs[k])] = true;
    }
  }
  for (std::size_t s : recomputed_steps) made_forward[at(p.steps[s].node)] = false;
  micro_batch_banks b;
  b.per_node.assign(at(g.size()), false);
  for (int i = 0; i < g.size(); ++i)
    b.per_node[at(i)] = g[i].kind != op::parameter && g[i].kind != op::param_grad && made_forward[at(i)] &&
                        read_backward[at(i)] && st.computed_here(i);
  for (int i : {idx.forward_begin_node, idx.forward_end_node, idx.backward_begin_node, idx.backward_end_node})
    if (i >= 0) b.per_node[at(i)] = true;  // an inference program has no backward block
  return b;
}

}  // namespace shardgraph::plan
