#pragma once
// arena: which values share one arena by lifetime, and where each lies in it (memory_plan.hpp
// places them).
//
//   const plan::arena_layout a = plan::plan_arena(in, m, written_into, carried, groups);
//   a.values[k], a.offsets[k];   // node a.values[k] is a view at byte a.offsets[k] of the arena
//   a.bytes;                     // the arena's size
//
// A value shares the arena when it is one buffer written by its step and read only by steps:
// not kept per layer, not a collective's (their streams may run on), not kept across calls
// (parameters, inputs, outputs, the blocks' values), nothing under pipelines (micro-batch slots)
// or without views; a param_grad that a bucket reduce-scatters does (its whole buffer is reused).
// Two placements go beyond lifetimes: the cross-entropy gradient takes its logits' bytes when its
// step is their last reader (each kernel reads a logit before it writes that element's gradient),
// and the operands of batched products lie at one stride (plan/batch_operands.hpp). An output
// that copies an arena value of its size is a view of the same bytes (its copy is then a no-op).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/plan/carried_values.hpp"
#include "shardgraph/plan/materialized.hpp"
#include "shardgraph/plan/memory_inputs.hpp"
#include "shardgraph/plan/memory_plan.hpp"
#include "shardgraph/plan/per_layer.hpp"

namespace shardgraph::plan {

// The memory plans that decide which values share the arena.
struct arena_inputs {
  const materialized_values& materialized;
  const std::vector<int>& written_into;  // plan_gradients_in_place
  const carried_values& carried;
};

inline bool shares_arena(const memory_inputs& in, const arena_inputs& a, int i) {
  const program_view& p = in.program;
  const graph_view& g = p.nodes;
  const node& n = g[i];
  const auto at = [](int k) { return static_cast<std::size_t>(k); };
  if (!in.views || !in.options.reuse || in.pipelined || per_layer(p, in.steps, in.scattered_grad, i) ||
      !a.materialized.materialized[at(i)] || a.written_into[at(i)] >= 0 || a.carried.held_elsewhere(i))
    return false;
  if (n.kind == op::param_grad && !in.scattered_grad.empty() && in.scattered_grad[at(i)])
    return in.layout.of(i).numel() > 0;
  if (keeps_own_memory(n.kind)) return false;
  const auto communicates = [&](int j) {
    const std::size_t s = in.steps.producer_step[at(j)];
    return s == step_index::no_step || p.steps[s].kind == step_kind::communicate;
  };
  if (communicates(i) || in.layout.of(i).numel() == 0) return false;
  for (int r : in.steps.readers[at(i)]) {
    if (a.materialized.unread[at(r)]) continue;  // its step does not run
    if (communicates(r)) return false;
    const int loop = g[r].region;
    if (loop >= 0 && g[loop].region >= 0) return false;  // nested repeats: not planned
  }
  return true;
}

// Sorted and merged, so that no two ranges of one value meet.
inline std::vector<memory_plan::steps> merged_ranges(std::vector<memory_plan::steps> live) {
  std::sort(live.begin(), live.end(), [](auto x, auto y) { return x.first < y.first; });
  std::vector<memory_plan::steps> merged;
  for (const memory_plan::steps& r : live)
    if (!merged.empty() && r.first <= merged.back().last + 1)
      merged.back().last = std::max(merged.back().last, r.last);
    else
      merged.push_back(r);
  return merged;
}

// The steps over which value i is live: from the step writing it to the last reading it; a read
// inside a repeat block that i is outside of lasts to the block's end (every layer reads it), and
// an output reading it (the output is a view of it) keeps it to the end. Recomputation runs
// forward steps again at the start of each backward iteration (the backward block's loop_begin
// step): a recomputed value is live again from there to its last backward reader, and a value a
// recomputed step reads is live through the whole backward block. An alternating block's input
// and its result are the loop's carry: live through the loop.
inline memory_plan::value lifetime(const memory_inputs& in, const arena_inputs& a, int i) {
  const program_view& p = in.program;
  const graph_view& g = p.nodes;
  const auto at = [](int k) { return static_cast<std::size_t>(k); };
  const std::vector<std::size_t>& produced = in.steps.producer_step;
  const auto backward_blocks = [&](auto&& range_of) {
    for (int b = 0; b < g.size(); ++b)
      if (g[b].kind == op::repeat_begin && g[b].reverse) range_of(b);
  };
  memory_plan::value v;
  v.bytes = checked_bytes(in.layout.of(i).numel(), dtype_size(g[i].type), "bind: memory plan");
  const int writer = in.fused.writer_of(g, i);
  memory_plan::steps first{produced[at(writer)], produced[at(writer)]};
  if (g[i].kind == op::param_grad && a.written_into[at(g[i].inputs[0])] == i)
    first.first = produced[at(g[i].inputs[0])];  // its producer writes it in place
  const bool rerun = recomputed(p, i);
  for (int r : in.steps.readers[at(i)]) {
    if (a.materialized.unread[at(r)]) continue;  // its step does not run
    const std::size_t s = produced[at(r)];
    const int loop = g[r].region;
    if (rerun && loop >= 0 && g[loop].reverse) {
      v.live.push_back({loop_begin_step(p, loop), s});
      continue;
    }
    first.last = std::max(first.last, s);
    if (g[r].kind == op::output) first.last = p.steps.size() - 1;
    if (loop >= 0 && g[i].region != loop) first.last = std::max(first.last, loop_end_step(p, loop));
    if (recomputed(p, r) && !rerun)  // read at each backward iteration's start, written long before
      backward_blocks([&](int b) { v.live.push_back({loop_begin_step(p, b), loop_end_step(p, b)}); });
  }
  const std::vector<int>& partner = a.carried.carry_partner;
  if (const int block = partner[at(i)] >= 0 ? i : a.carried.carried_into[at(i)];
      block >= 0 && partner[at(block)] >= 0)
    v.live.push_back({loop_begin_step(p, block), loop_end_step(p, block)});
  if (rerun)  // written and read by the recomputation at each backward iteration's start
    backward_blocks([&](int b) { v.live.push_back({loop_begin_step(p, b), loop_begin_step(p, b)}); });
  v.live.push_back(first);
  v.live = merged_ranges(std::move(v.live));
  return v;
}

struct arena_layout {
  std::vector<int> values;           // the nodes in the arena, in node order (outputs viewing one after)
  std::vector<std::size_t> offsets;  // per entry of `values`: its byte offset
  std::size_t bytes = 0;             // the arena's size
  std::int64_t values_bytes = 0;     // what the shared values (not the outputs) would take apart
  std::size_t shared = 0;            // how many entries of `values` share it by lifetime (the rest: outputs)
};

namespace detail {

// The cross-entropy gradient placed in its logits' bytes: slot[k] = f, the two live as one value.
inline void place_gradient_over_logits(const memory_inputs& in, const std::vector<int>& shared,
                                       std::vector<memory_plan::value>& lifetimes,
                                       std::vector<std::size_t>& slot) {
  const graph_view& g = in.program.nodes;
  for (std::size_t k = 0; k < shared.size(); ++k) {
    const int i = shared[k];
    if (g[i].kind != op::cross_entropy_grad) continue;
    const auto from = std::find(shared.begin(), shared.end(), g[i].inputs[0]);
    if (from == shared.end()) continue;
    const std::size_t f = static_cast<std::size_t>(from - shared.begin());
    const int x = shared[f];
    const memory_plan::value& logits = lifetimes[f];
    if (g[x].type != g[i].type || in.layout.of(x).numel() != in.layout.of(i).numel() ||
        logits.live.size() != 1 || lifetimes[k].live.size() != 1 ||
        logits.live.back().last != in.steps.producer_step[static_cast<std::size_t>(i)] || slot[f] != f)
      continue;
    lifetimes[f].live.back().last = lifetimes[k].live.back().last;
    lifetimes[k].live.clear();
    slot[k] = f;
  }
}

// Each group of batched operands in the arena as one value live over the members' lifetimes, member
// m at m strides into it: slot[k] = the group's first, shift[k] = its place.
inline void place_batch_operands_together(const std::vector<int>& shared,
                                          const std::vector<std::vector<int>>& groups,
                                          std::vector<memory_plan::value>& lifetimes,
                                          std::vector<std::size_t>& slot, std::vector<std::size_t>& shift) {
  for (const std::vector<int>& group : groups) {
    std::vector<std::size_t> at;
    for (int v : group)
      if (const auto it = std::find(shared.begin(), shared.end(), v); it != shared.end())
        at.push_back(static_cast<std::size_t>(it - shared.begin()));
    bool alone = at.size() == group.size();
    for (std::size_t k : at)
      alone =
          alone && slot[k] == k && !lifetimes[k].live.empty() && std::count(slot.begin(), slot.end(), k) == 1;
    if (!alone) continue;
    const std::size_t stride = memory_plan::aligned(lifetimes[at[0]].bytes);
    memory_plan::value& block = lifetimes[at[0]];
    for (std::size_t m = 1; m < at.size(); ++m) {
      block.live.insert(block.live.end(), lifetimes[at[m]].live.begin(), lifetimes[at[m]].live.end());
      lifetimes[at[m]].live.clear();
      slot[at[m]] = at[0];
      shift[at[m]] = m * stride;
    }
    block.bytes = stride * at.size();
    block.live = merged_ranges(std::move(block.live));
  }
}

}  // namespace detail

// `groups`: batch_operand_groups (plan/batch_operands.hpp).
inline arena_layout plan_arena(const memory_inputs& in, const arena_inputs& a,
                               const std::vector<std::vector<int>>& groups) {
  const graph_view& g = in.program.nodes;
  arena_layout layout;
  std::vector<int> shared;
  std::vector<memory_plan::value> lifetimes;
  for (int i = 0; i < g.size(); ++i)
    if (shares_arena(in, a, i)) shared.push_back(i), lifetimes.push_back(lifetime(in, a, i));
  if (shared.empty()) return layout;
  std::vector<std::size_t> slot(shared.size()), shift(shared.size(), 0);
  for (std::size_t k = 0; k < shared.size(); ++k) slot[k] = k;
  detail::place_gradient_over_logits(in, shared, lifetimes, slot);
  detail::place_batch_operands_together(shared, groups, lifetimes, slot, shift);
  std::vector<memory_plan::value> placed_values;
  std::vector<std::size_t> placed_index(shared.size());
  for (std::size_t k = 0; k < shared.size(); ++k)
    if (slot[k] == k) placed_index[k] = placed_values.size(), placed_values.push_back(lifetimes[k]);
  const memory_plan::placement placement = memory_plan::place(placed_values);
  memory_plan::verify(placed_values, placement);
  layout.bytes = placement.arena_bytes;
  layout.shared = shared.size();
  std::vector<std::size_t> offset_of(static_cast<std::size_t>(g.size()), 0);
  std::vector<bool> in_arena(static_cast<std::size_t>(g.size()), false);
  for (std::size_t k = 0; k < shared.size(); ++k) {
    const int i = shared[k];
    layout.values.push_back(i);
    layout.offsets.push_back(placement.offsets[placed_index[slot[k]]] + shift[k]);
    offset_of[static_cast<std::size_t>(i)] = layout.offsets.back();
    in_arena[static_cast<std::size_t>(i)] = true;
    layout.values_bytes +=
        static_cast<std::int64_t>(in.layout.of(i).numel()) * static_cast<std::int64_t>(dtype_size(g[i].type));
  }
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::output) continue;
    const int from = g[i].inputs[0];
    if (!in_arena[static_cast<std::size_t>(from)] || g[from].type != g[i].type ||
        in.layout.of(from).numel() != in.layout.of(i).numel())
      continue;
    layout.values.push_back(i);
    layout.offsets.push_back(offset_of[static_cast<std::size_t>(from)]);
  }
  return layout;
}

}  // namespace shardgraph::plan
