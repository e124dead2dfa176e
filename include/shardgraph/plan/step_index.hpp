#pragma once
// step_index: what every planning pass reads of a compiled program's step list, computed once.
//
//   const plan::step_index idx = plan::index_steps(program, layers);
//   idx.producer_step[i];   // the step computing node i (no_step: an input or a parameter)
//   idx.readers[i];         // the nodes reading node i, in node order
//   idx.phase_of(s);        // pre, forward_block, post, backward_block or tail
//
// A training program's steps fall into five phases: `pre` (before the forward repeat block: the
// embeddings), the forward block, `post` (after it: head, loss, the seed of backward and the head's
// backward), the backward block, and `tail` (after it: the embeddings' gradients). A program without
// a repeat block is all `pre`; an inference program has no backward block (its post runs to the end).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/program/program.hpp"

namespace shardgraph::plan {

enum class phase { pre, forward_block, post, backward_block, tail };

struct step_index {
  static constexpr std::size_t no_step = static_cast<std::size_t>(-1);

  std::vector<std::size_t> producer_step;  // per node: the step computing it (no_step: none)
  std::vector<std::vector<int>> readers;   // per node: the nodes reading it
  std::int64_t layers = 1;                 // a repeat block's layer count (1: no block)
  int forward_blocks = 0;                  // repeat blocks run forward (pipelines need exactly one)
  // The forward and backward blocks' loop_begin and loop_end steps and the nodes of those steps
  // (-1: no such block). The node of a loop_begin step is its repeat_begin, of a loop_end its repeat_end.
  int forward_begin_step = -1, forward_end_step = -1, backward_begin_step = -1, backward_end_step = -1;
  int forward_begin_node = -1, forward_end_node = -1, backward_begin_node = -1, backward_end_node = -1;

  phase phase_of(std::size_t s) const {
    const auto at = [](int step) { return static_cast<std::size_t>(step); };
    if (forward_begin_step < 0 || s < at(forward_begin_step)) return phase::pre;
    if (s <= at(forward_end_step)) return phase::forward_block;
    if (backward_begin_step < 0 || s < at(backward_begin_step)) return phase::post;
    if (s <= at(backward_end_step)) return phase::backward_block;
    return phase::tail;
  }
};

// The loop_begin step of repeat block `repeat_begin` (a node of kind repeat_begin).
inline std::size_t loop_begin_step(const program_view& p, int repeat_begin) {
  for (std::size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].kind == step_kind::loop_begin && p.steps[s].node == repeat_begin) return s;
  fail("bind: plan", "repeat block '" + std::string(p.nodes[repeat_begin].name.view()) + "' has no begin step",
       "this is a bug in compile(); please report it");
}
// The loop_end step of repeat block `repeat_begin`.
inline std::size_t loop_end_step(const program_view& p, int repeat_begin) {
  for (std::size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].kind == step_kind::loop_end && p.nodes[p.steps[s].node].region == repeat_begin) return s;
  fail("bind: plan", "repeat block '" + std::string(p.nodes[repeat_begin].name.view()) + "' has no end step",
       "this is a bug in compile(); please report it");
}

// Indexes `p`'s steps; `layers` is the size bound to the layer count (used when the program has a
// repeat block).
inline step_index index_steps(const program_view& p, std::int64_t layers) {
  const graph_view& g = p.nodes;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  step_index idx;
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == op::repeat_begin) {
      idx.layers = layers;
      if (!g[i].reverse) ++idx.forward_blocks;
    }
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    const step& st = p.steps[s];
    const node& n = g[st.node];
    const bool reverse = n.kind == op::repeat_begin ? n.reverse
                         : n.kind == op::repeat_end ? g[n.region].reverse
                                                    : false;
    if (st.kind == step_kind::loop_begin)
      (reverse ? idx.backward_begin_step : idx.forward_begin_step) = static_cast<int>(s);
    if (st.kind == step_kind::loop_end)
      (reverse ? idx.backward_end_step : idx.forward_end_step) = static_cast<int>(s);
  }
  if (idx.forward_begin_step >= 0) {
    idx.forward_begin_node = p.steps[at(idx.forward_begin_step)].node;
    idx.forward_end_node = p.steps[at(idx.forward_end_step)].node;
  }
  if (idx.backward_begin_step >= 0) {
    idx.backward_begin_node = p.steps[at(idx.backward_begin_step)].node;
    idx.backward_end_node = p.steps[at(idx.backward_end_step)].node;
  }
  idx.producer_step.assign(at(g.size()), step_index::no_step);
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    const step& st = p.steps[s];
    for (int j = st.first >= 0 ? st.first : st.node; j <= st.node; ++j) idx.producer_step[at(j)] = s;
  }
  idx.readers.assign(at(g.size()), {});
  for (int i = 0; i < g.size(); ++i)
    for (int k = 0; k < g[i].input_count; ++k) idx.readers[at(g[i].inputs[k])].push_back(i);
  return idx;
}

}  // namespace shardgraph::plan
