#pragma once
// carried_values: a repeat block's result written where its next layer reads its input, and a
// block's input written where its first layer reads it, so that the loop copies nothing.
//
//   const plan::carried_values c = plan::plan_carried_values(in, m, written_into);
//   c.carried_into[r];    // the block whose next layer's input result r is (-1: none)
//   c.carry_partner[b];   // the result alternating block b's input alternates with (-1: none)
//   c.carried_out[r];     // the loop's value that result r's last layer writes (-1: none)
//   c.block_input_of[x];  // the block whose first layer's input memory x is (-1: none)
//
// A block's result (the value its repeat_end carries to the next layer) is written where the next
// layer reads its input. A training forward block's inputs are kept per layer for the backward:
// layer l writes into layer l + 1's. Any other block's input (a backward block's gradient, running
// from the last layer down; an inference forward's activations) alternates between two buffers,
// its own and the result's, both live through the whole loop: layer l reads one and writes the
// other. Only where nothing but the block reads the result and nothing reads it after its layer
// (not kept per layer, not recomputed), outside pipelines (their stages receive inputs). The last
// layer writes its result into the loop's own value (carried_out), so that the loop's end copies
// nothing either.
// A block's input that only the block reads is written where the block's first layer reads it
// (layer 0's kept input or the first carry buffer forward, the last layer's carry buffer
// backward), so that the loop's start copies nothing: outside pipelines, where a step other than
// a collective writes it and it is one plain value.
#include <cstddef>
#include <vector>

#include "shardgraph/plan/materialized.hpp"
#include "shardgraph/plan/memory_inputs.hpp"
#include "shardgraph/plan/per_layer.hpp"

namespace shardgraph::plan {

struct carried_values {
  std::vector<int> carried_into;    // per node: the block whose next layer's input it is (-1)
  std::vector<int> carry_partner;   // per alternating block: the result it alternates with (-1)
  std::vector<int> carried_out;     // per carried result: the loop value its last layer writes (-1)
  std::vector<int> block_input_of;  // per node: the block whose first layer's input memory it is (-1)

  // Whether value i needs no memory of its own: a block's input held in the block's, or the result
  // of a block that keeps its inputs per layer (the next layer's input, at the last the loop's value).
  bool held_elsewhere(int i) const {
    const auto at = [](int k) { return static_cast<std::size_t>(k); };
    const int block = carried_into[at(i)];
    return block_input_of[at(i)] >= 0 ||
           (block >= 0 && carry_partner[at(block)] < 0 && carried_out[at(i)] >= 0);
  }
};

// The values that live across steps or calls in memory of their own: parameters and their
// gradients, the program's inputs and outputs, the repeat blocks' values.
inline bool keeps_own_memory(op kind) {
  switch (kind) {
    case op::parameter:
    case op::param_grad:
    case op::input:
    case op::output:
    case op::repeat_begin:
    case op::repeat_end:
      return true;
    default:
      return false;
  }
}

namespace detail {

inline void plan_carried_results(const memory_inputs& in, const materialized_values& m,
                                 const std::vector<int>& written_into, carried_values& c) {
  const graph_view& g = in.program.nodes;
  const std::vector<int>& stored_in = in.fused.stored_in;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  const auto layered = [&](int i) { return per_layer(in.program, in.steps, in.scattered_grad, i); };
  const auto same_size = [&](int a, int b) {
    return g[a].type == g[b].type && in.layout.of(a).numel() == in.layout.of(b).numel();
  };
  for (int e = 0; e < g.size(); ++e) {
    if (g[e].kind != op::repeat_end) continue;
    const int block = g[e].region, result = g[e].inputs[0];
    const bool alternating = !layered(block);
    if (result == block || g[result].region != block) continue;
    if (alternating && stored_in[at(block)] >= 0) continue;
    if (g[result].kind == op::parameter || layered(result) || recomputed(in.program, result) ||
        !m.materialized[at(result)] || stored_in[at(result)] >= 0 || written_into[at(result)] >= 0 ||
        !same_size(result, block))
      continue;
    bool read_in_block = true;
    for (int r : in.steps.readers[at(result)]) read_in_block = read_in_block && g[r].region == block;
    if (!read_in_block) continue;
    c.carried_into[at(result)] = block;
    if (alternating) c.carry_partner[at(block)] = result;
    if (m.materialized[at(e)] && !m.unread[at(e)] && stored_in[at(e)] < 0 && !layered(e) &&
        same_size(e, result))
      c.carried_out[at(result)] = e;
  }
}

inline void plan_block_inputs(const memory_inputs& in, const materialized_values& m,
                              const std::vector<int>& written_into, carried_values& c) {
  const program_view& p = in.program;
  const graph_view& g = p.nodes;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  for (int block = 0; block < g.size(); ++block) {
    if (g[block].kind != op::repeat_begin || in.fused.stored_in[at(block)] >= 0) continue;
    const int x = g[block].inputs[0];
    const std::size_t s = in.steps.producer_step[at(x)];
    const std::vector<int>& readers = in.steps.readers[at(x)];
    if (keeps_own_memory(g[x].kind) || s == step_index::no_step ||
        p.steps[s].kind == step_kind::communicate || readers.size() != 1 || readers.front() != block ||
        !m.materialized[at(x)] || m.unread[at(x)] || in.fused.stored_in[at(x)] >= 0 ||
        written_into[at(x)] >= 0 || c.carried_into[at(x)] >= 0 ||
        per_layer(p, in.steps, in.scattered_grad, x) || g[x].type != g[block].type ||
        in.layout.of(x).numel() != in.layout.of(block).numel())
      continue;
    c.block_input_of[at(x)] = block;
  }
}

}  // namespace detail

inline carried_values plan_carried_values(const memory_inputs& in, const materialized_values& m,
                                          const std::vector<int>& written_into) {
  const std::size_t n = static_cast<std::size_t>(in.program.nodes.size());
  carried_values c{std::vector<int>(n, -1), std::vector<int>(n, -1), std::vector<int>(n, -1),
                   std::vector<int>(n, -1)};
  if (in.pipelined) return c;
  detail::plan_carried_results(in, m, written_into, c);
  detail::plan_block_inputs(in, m, written_into, c);
  return c;
}

}  // namespace shardgraph::plan
