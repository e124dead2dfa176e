#pragma once
// call_count: how many compute-backend calls one forward() of a rank makes (one training step's
// forward and backward), read from its call list without running it:
//
//   count_backend_calls(program, calls, steps, memory, recomputed_steps)
//     = sum over steps of backend_calls(each call) x (the block's layers for a step inside it)
//       + the recomputed steps' calls x the backward block's layers
//       + the loop's copies (a block's input, result or next layer's input, where they are not the
//         same buffer)
//
// A call's backend calls: one for a kernel, an elementwise chain, a batched product (its operands
// lie at one stride, as bind places them), a slice, a copy, a gradient sum or an output; a
// collective's block moves around its communicator call (all_reduce 1 copy, all_gather and
// reduce_scatter 1, all_to_all 2); a gradient handed to its bucket none here (the bucket's packing
// and reductions are the bucket plan's).
#include <cstddef>
#include <cstdint>
#include <span>

#include "shardgraph/plan/call_list.hpp"
#include "shardgraph/plan/step_index.hpp"

namespace shardgraph::plan {

inline std::int64_t backend_calls(const bound_call& c) {
  switch (c.kind) {
    case call_kind::bucket_add:
      return 0;
    case call_kind::collective:
      return c.kernel == op::all_to_all ? 2 : 1;
    default:
      return 1;
  }
}

inline std::int64_t backend_calls(std::span<const bound_call> calls) {
  std::int64_t n = 0;
  for (const bound_call& c : calls) n += backend_calls(c);
  return n;
}

namespace detail {

// Whether node a's buffer in layer la is node b's in layer lb (the executor's value_at: a value
// kept per layer has one buffer per layer, any other one buffer).
inline bool same_buffer(const memory_layout& m, int a, std::int64_t la, int b, std::int64_t lb) {
  const value_place pa = m.place_of(a, la), pb = m.place_of(b, lb);
  if (pa.node != pb.node) return false;
  return !m.values[static_cast<std::size_t>(pa.node)].per_layer || pa.layer == pb.layer;
}

// The copies of a repeat block's loop markers over all its layers: its input into the block's
// value at the first layer, each layer's result into the next one's input, the last result out.
inline std::int64_t loop_copies(const program_view& p, const memory_layout& m, const step& begin, const step& end,
                                std::int64_t layers) {
  const node& b = p.nodes[begin.node];
  const node& e = p.nodes[end.node];
  const std::int64_t first = b.reverse ? layers - 1 : 0, step = b.reverse ? -1 : 1;
  std::int64_t copies = same_buffer(m, b.inputs[0], first, begin.node, first) ? 0 : 1;
  for (std::int64_t k = 0, l = first; k < layers; ++k, l += step) {
    if (k + 1 < layers)
      copies += same_buffer(m, e.inputs[0], l, begin.node, l + step) ? 0 : 1;
    else
      copies += same_buffer(m, e.inputs[0], l, end.node, l) ? 0 : 1;
  }
  return copies;
}

}  // namespace detail

inline std::int64_t count_backend_calls(const program_view& p, const call_list& calls, const step_index& steps,
                                        const memory_layout& memory,
                                        std::span<const std::size_t> recomputed_steps) {
  std::int64_t total = 0, layers = 1;
  std::size_t begin = 0;
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    const step& st = p.steps[s];
    if (st.kind == step_kind::loop_begin) layers = steps.layers, begin = s;
    if (st.kind == step_kind::loop_end) {
      total += detail::loop_copies(p, memory, p.steps[begin], st, steps.layers);
      if (p.nodes[p.steps[begin].node].reverse)  // recomputed once per backward layer
        for (std::size_t r : recomputed_steps) total += backend_calls(calls.of_step(r)) * steps.layers;
      layers = 1;
    }
    total += backend_calls(calls.of_step(s)) * layers;
  }
  return total;
}

}  // namespace shardgraph::plan
