#pragma once
// call_list: the calls each step of a rank's program makes, planned at bind from the program, the
// fusion plan, the memory plan, the bucket plan and the pipeline; the executor walks them and
// decides nothing (plan/bound_call.hpp says what a call holds).
//
//   plan::call_list calls = plan::plan_calls(in);
//   calls.of_step(s);   // step s's calls, in order; empty: the step makes no call
//
// A step makes no call when: only outputs forward() leaves out read its value (memory plan's
// unread); another node's call writes it (a product's epilogue, a batched product, dq's call for
// dk and dv...); it is a loop marker (the executor's loop runs the layers); its param_grad is
// written by a gradient bucket, or in place by its producer (and is not reduce-scattered).
// The list depends on the backward's seed (a cross-entropy gradient planned with its loss runs
// apart under a loss scale): the executor plans it again when the scale switches between 1 and not.
#include <cstddef>
#include <span>
#include <vector>

#include "shardgraph/plan/bound_call.hpp"
#include "shardgraph/plan/compute_calls.hpp"
#include "shardgraph/plan/gradient_buckets.hpp"
#include "shardgraph/plan/memory_layout.hpp"

namespace shardgraph::plan {

struct call_inputs {
  shardgraph::program_view program;
  const local_layout& layout;
  const model_sizes& sizes;
  const step_fusion& fused;
  const memory_layout& memory;          // unread, values[i].written_into
  const gradient_bucket_plan& buckets;  // bucketed_grad, written_by_bucket, scattered_grad
  std::span<const int> axis_sizes;      // per mesh axis: its ranks
  std::span<const int> divisor_entry;   // per node: a mean loss's targets input among the counted (-1)
  bool pipelined = false;               // a stage sums its param_grads over micro-batches
  bool seed_is_one = true;              // the backward's seed is 1 (no loss scale)
};

struct call_list {
  std::vector<std::vector<bound_call>> steps;  // per step of the program
  bool seed_is_one = true;                     // the seed it was planned for

  std::span<const bound_call> of_step(std::size_t s) const { return steps[s]; }
};

namespace detail {

// (outer, mid, inner) of node i's local value split along `dim` into `parts` blocks.
inline compute::block_layout blocks_along(const call_inputs& in, int i, int dim, int parts) {
  const std::vector<std::int64_t>& d = in.layout.of(i).local;
  const std::size_t at = static_cast<std::size_t>(dim);
  compute::block_layout b;
  b.parts = parts;
  b.outer = dims_product(d, 0, at);
  b.mid = d[at];
  b.inner = dims_product(d, at + 1, d.size());
  b.element_bytes = static_cast<std::int64_t>(dtype_size(in.program.nodes[i].type));
  return b;
}

// A call reading `from` into node i (copy, gradient_sum, output, bucket_add).
inline bound_call moving_call(call_kind kind, const node& n, int i, int from) {
  bound_call c;
  c.kind = kind;
  c.node = i;
  c.kernel = n.kind;
  c.type = n.type;
  c.out = i;
  c.in[0] = from;
  c.input_count = 1;
  return c;
}

// An all_to_all's two block moves: the input's to_dim split into one block per destination, then
// each received block (the sender's from_dim part) interleaved along from_dim.
inline void all_to_all_blocks(const call_inputs& in, int i, bound_call& c) {
  const node& n = in.program.nodes[i];
  c.blocks[0] = blocks_along(in, n.inputs[0], n.to_dim, c.parts);
  c.blocks[0].mid /= c.parts;
  std::vector<std::int64_t> block = in.layout.of(i).local;
  const std::size_t from = static_cast<std::size_t>(n.from_dim);
  block[from] /= c.parts;
  c.blocks[1] = c.blocks[0];
  c.blocks[1].outer = dims_product(block, 0, from);
  c.blocks[1].mid = block[from];
  c.blocks[1].inner = dims_product(block, from + 1, block.size());
  c.blocks[0].element_bytes = c.blocks[1].element_bytes = static_cast<std::int64_t>(dtype_size(n.type));
}

// A collective step: over one rank, a copy.
inline bound_call collective_call(const call_inputs& in, int i) {
  const node& n = in.program.nodes[i];
  const int parts = in.axis_sizes[static_cast<std::size_t>(n.axis)];
  if (parts == 1) return moving_call(call_kind::copy, n, i, n.inputs[0]);
  bound_call c = moving_call(call_kind::collective, n, i, n.inputs[0]);
  c.axis = n.axis;
  c.parts = parts;
  c.in_numel = in.layout.of(n.inputs[0]).numel();
  c.out_numel = in.layout.of(i).numel();
  if (n.kind == op::all_gather) c.blocks[0] = blocks_along(in, n.inputs[0], n.from_dim, parts);
  if (n.kind == op::reduce_scatter) c.blocks[0] = blocks_along(in, i, n.to_dim, parts);
  if (n.kind == op::all_to_all) all_to_all_blocks(in, i, c);
  return c;
}

inline std::vector<bound_call> communicate_calls(const call_inputs& in, int i) {
  const node& n = in.program.nodes[i];
  if (in.buckets.bucketed_grad[static_cast<std::size_t>(i)] >= 0)
    return {moving_call(call_kind::bucket_add, n, i, n.inputs[0])};
  return {collective_call(in, i)};
}

inline bound_call slice_call(const call_inputs& in, int i) {
  const node& n = in.program.nodes[i];
  bound_call c = moving_call(call_kind::slice, n, i, n.inputs[0]);
  c.axis = n.axis;
  c.parts = in.axis_sizes[static_cast<std::size_t>(n.axis)];
  c.blocks[0] = blocks_along(in, i, n.to_dim, c.parts);
  c.slice_index = in.layout.coordinate(n.axis);
  return c;
}

// A copy step: none when a bucket writes the param_grad; the copy unless the producer wrote it in
// place (a pipeline stage's param_grad is summed over micro-batches); then, for a reduce-scattered
// gradient (ZeRO-2, 3), its hand-over to the bucket.
inline std::vector<bound_call> copy_calls(const call_inputs& in, int i) {
  const node& n = in.program.nodes[i];
  const std::size_t at = static_cast<std::size_t>(i);
  if (in.buckets.written_by_bucket[at]) return {};
  std::vector<bound_call> calls;
  if (in.memory.values[static_cast<std::size_t>(n.inputs[0])].written_into != i) {
    const bool summed = in.pipelined && n.kind == op::param_grad;
    calls.push_back(moving_call(summed ? call_kind::gradient_sum : call_kind::copy, n, i, n.inputs[0]));
  }
  if (in.buckets.scattered_grad[at]) calls.push_back(moving_call(call_kind::bucket_add, n, i, i));
  return calls;
}

inline std::vector<bound_call> step_calls(const call_inputs& in, const compute_call_inputs& compute,
                                          const step& st) {
  const int i = st.node;
  if (in.memory.unread[static_cast<std::size_t>(i)]) return {};  // only outputs left out read it
  switch (st.kind) {
    case step_kind::compute:
      return compute_step_calls(compute, i);
    case step_kind::fused:
      return fused_step_calls(compute, st.first, i);
    case step_kind::communicate:
      return communicate_calls(in, i);
    case step_kind::slice:
      return {slice_call(in, i)};
    case step_kind::copy:
      return copy_calls(in, i);
    case step_kind::output:
      return {moving_call(call_kind::output, in.program.nodes[i], i, in.program.nodes[i].inputs[0])};
    case step_kind::loop_begin:
    case step_kind::loop_end:
      return {};
  }
  return {};
}

}  // namespace detail

// Every step's calls.
inline call_list plan_calls(const call_inputs& in) {
  const compute_call_inputs compute{.program = in.program,
                                    .layout = in.layout,
                                    .sizes = in.sizes,
                                    .fused = in.fused,
                                    .divisor_entry = in.divisor_entry,
                                    .seed_is_one = in.seed_is_one};
  call_list list;
  list.seed_is_one = in.seed_is_one;
  list.steps.reserve(in.program.steps.size());
  for (const step& st : in.program.steps) list.steps.push_back(detail::step_calls(in, compute, st));
  return list;
}

}  // namespace shardgraph::plan
