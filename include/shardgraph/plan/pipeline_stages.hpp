#pragma once
// pipeline_stages: one rank's part of a pipeline, planned at bind from the program, its step index,
// the pipeline_options and the rank's place on the pipeline axis.
//
//   const plan::pipeline_stages st = plan::plan_pipeline_stages(program, idx, {.micro_batches = 4}, 2, 1);
//   st.chunks;             // {{3, 6}}: this rank runs block layers [3, 6) (6 layers over 2 stages)
//   st.holds_last;         // true: it runs the head and the loss (the `post` phase)
//   st.computed_here(i);   // whether this rank runs the step computing node i
//   st.banks, st.inbox;    // micro-batches in flight at once, activations waiting for their forward
//
// The layers of the program's one repeat block are split over axis_size * virtual_stages virtual
// stages (pipeline::partition_layers); this rank (coordinate r) runs virtual stages r, r + p, ...,
// one model chunk each. Every rank runs both block phases for its layers; the first stage runs
// `pre` (the embeddings) and `tail` (their gradients), the last `post` (head, loss, the head's
// backward). A weight outside the block read both in `pre` and in `post` (GPT-2's wte) is tied: the
// first and the last stage hold it, and the last stage also runs `tail` from a zero gradient so that
// the head's part of its gradient is summed over the two.
//
// With no pipeline axis, or one of size 1, nothing is split: pipelined() is false and every
// predicate is true.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/pipeline/partition.hpp"
#include "shardgraph/pipeline/schedule.hpp"
#include "shardgraph/plan/step_index.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/pipeline_options.hpp"

namespace shardgraph::plan {

struct pipeline_stages {
  int axis = -1;       // the pipeline mesh axis (-1: one stage)
  int coordinate = 0;  // this rank's stage on it
  pipeline::stage_partition partition;
  pipeline::schedule schedule;
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks;  // per model chunk: block layers [first, end)
  std::vector<bool> held_layer;                               // per block layer: its weights are here
  std::vector<bool> reads_pre, reads_post;  // per node: a parameter outside the block read before / after it
  bool holds_first = true, holds_last = true;  // this rank runs virtual stage 0 / the last virtual stage
  bool tied = false;                           // some parameter is read both before and after the block
  int banks = 1;  // micro-batch slots: the most micro-batches alive at once (first forward to last backward;
                  // 1 for a program without backward: its micro-batches run one after another)
  int inbox = 0;  // receive buffers: the most activations received and not yet consumed by their forward
  std::vector<bool> computed, needed, in_block;  // per node (pipelined only): see the predicates below

  bool pipelined() const { return axis >= 0; }

  // Whether this rank runs the step that computes node i: every rank runs the blocks' phases, the
  // first stage the embeddings and the embeddings' gradients, the last the head and loss (and,
  // with a tied weight, the embeddings' gradient phase from a zero input).
  bool computed_here(int i) const { return !pipelined() || computed[at(i)]; }
  // Whether this rank computes node i or runs a step reading it (outputs: all, they are broadcast).
  // A value read but computed on another stage stays zero here: the first stage's tail adds the
  // head's part of a tied weight's gradient, which the last stage computes.
  bool needed_here(int i) const { return !pipelined() || needed[at(i)]; }
  // Whether this rank holds parameter i (layer `layer` for block weights).
  bool holds(int i, std::int64_t layer) const {
    if (!pipelined()) return true;
    if (in_block[at(i)]) return holds_layer(layer);
    return (reads_pre[at(i)] && holds_first) || (reads_post[at(i)] && holds_last);
  }
  // Whether block layer `layer`'s weights and activations are on this rank.
  bool holds_layer(std::int64_t layer) const { return held_layer[static_cast<std::size_t>(layer)]; }

 private:
  static std::size_t at(int i) { return static_cast<std::size_t>(i); }
};

namespace detail {

// Which forward phase reads each weight outside the block: pre (the first stage) or post (the last).
// The forward ends at the seed of backward (the first `ones` node).
inline void find_outside_readers(const program_view& p, const step_index& idx, pipeline_stages& st) {
  const graph_view& g = p.nodes;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  int seed = g.size();
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == op::ones) seed = std::min(seed, i);
  for (int i = 0; i < seed; ++i)
    for (int k = 0; k < g[i].input_count; ++k) {
      const int x = g[i].inputs[k];
      if (g[x].kind != op::parameter || g[x].region >= 0 || g[i].region >= 0) continue;
      (i < idx.forward_begin_node ? st.reads_pre : st.reads_post)[at(x)] = true;
    }
  for (int i = 0; i < g.size(); ++i) st.tied = st.tied || (st.reads_pre[at(i)] && st.reads_post[at(i)]);
}

// The micro-batch slots and receive buffers this rank's action list needs.
inline void count_buffers(pipeline_stages& st) {
  const pipeline::schedule& s = st.schedule;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  const std::vector<pipeline::action>& actions = s.per_rank[at(st.coordinate)];
  std::vector<int> forwards(at(s.micro_batches), 0), backwards(at(s.micro_batches), 0);
  int alive = 0, most = 1;
  for (const pipeline::action& a : actions) {
    if (a.kind == pipeline::action_kind::forward && forwards[at(a.micro_batch)]++ == 0)
      most = std::max(most, ++alive);
    if (a.kind == pipeline::action_kind::backward && ++backwards[at(a.micro_batch)] == s.virtual_stages)
      --alive;
  }
  st.banks = most;
  int pending = 0, most_pending = 0;
  for (const pipeline::action& a : actions) {
    if (a.kind == pipeline::action_kind::recv_activation) most_pending = std::max(most_pending, ++pending);
    if (a.kind == pipeline::action_kind::forward && s.virtual_stage(st.coordinate, a.chunk) > 0) --pending;
  }
  st.inbox = most_pending;
}

// computed, needed and in_block per node (pipeline_stages' predicates).
inline void find_nodes_here(const program_view& p, const step_index& idx, pipeline_stages& st) {
  const graph_view& g = p.nodes;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  st.computed.assign(at(g.size()), true);
  for (int i = 0; i < g.size(); ++i) {
    const std::size_t s = idx.producer_step[at(i)];
    if (s == step_index::no_step) continue;  // inputs, parameters
    switch (idx.phase_of(s)) {
      case phase::pre:
        st.computed[at(i)] = st.holds_first;
        break;
      case phase::post:
        st.computed[at(i)] = st.holds_last;
        break;
      case phase::tail:
        st.computed[at(i)] = st.holds_first || (st.holds_last && st.tied);
        break;
      case phase::forward_block:
      case phase::backward_block:
        break;
    }
  }
  st.needed.assign(at(g.size()), false);
  st.in_block.assign(at(g.size()), false);
  for (int i = 0; i < g.size(); ++i) {
    st.in_block[at(i)] = g[i].region >= 0;
    bool needed = st.computed[at(i)] || g[i].kind == op::output;
    for (int reader : idx.readers[at(i)]) needed = needed || st.computed[at(reader)];
    st.needed[at(i)] = needed;
  }
}

}  // namespace detail

// Splits the layers over the pipeline axis (axis_size ranks, this rank at `coordinate`), makes and
// checks the schedule (identically on every rank, before any communication), and finds which
// phases and parameters this rank runs and holds. Throws shardgraph::error, the same on every rank,
// when the program has more than one repeat block, or the split or the schedule cannot be made.
inline pipeline_stages plan_pipeline_stages(const program_view& p, const step_index& idx,
                                            const pipeline_options& pipe, int axis_size, int coordinate) {
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  pipeline_stages st;
  st.held_layer.assign(static_cast<std::size_t>(idx.layers), true);
  st.reads_pre.assign(at(p.nodes.size()), false);
  st.reads_post.assign(at(p.nodes.size()), false);
  if (p.pipeline_axis < 0 || axis_size == 1) return st;
  constexpr auto where = "bind: pipeline";
  if (idx.forward_blocks != 1)
    fail(where, "the program has " + std::to_string(idx.forward_blocks) + " repeat blocks",
         "pipeline stages split one repeat block's layers: build the model with one repeat");
  const int ranks = axis_size;
  st.partition = pipeline::partition_layers(idx.layers, ranks * pipe.virtual_stages, pipe.stage_layers);
  st.schedule = pipeline::make_schedule(pipe.schedule, ranks, pipe.micro_batches, pipe.virtual_stages);
  pipeline::verify(st.schedule);
  st.axis = p.pipeline_axis;
  st.coordinate = coordinate;
  st.held_layer.assign(static_cast<std::size_t>(idx.layers), false);
  for (int c = 0; c < pipe.virtual_stages; ++c) {
    const int j = st.schedule.virtual_stage(coordinate, c);
    st.chunks.emplace_back(st.partition.first_layer[at(j)], st.partition.first_layer[at(j) + 1]);
    for (std::int64_t l = st.chunks.back().first; l < st.chunks.back().second; ++l)
      st.held_layer[static_cast<std::size_t>(l)] = true;
  }
  st.holds_first = st.schedule.virtual_stage(coordinate, 0) == 0;
  st.holds_last =
      st.schedule.virtual_stage(coordinate, pipe.virtual_stages - 1) == ranks * pipe.virtual_stages - 1;
  detail::find_outside_readers(p, idx, st);
  detail::count_buffers(st);
  if (idx.backward_begin_step < 0) st.banks = 1, st.inbox = 0;  // forward only: one micro-batch at a time
  detail::find_nodes_here(p, idx, st);
  return st;
}

}  // namespace shardgraph::plan
