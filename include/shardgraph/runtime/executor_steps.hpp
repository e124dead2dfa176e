#pragma once
// The walk over a segment of the steps: the layer loops (their carried inputs, ZeRO-3's gathers
// and prefetches, recomputation), each step's planned calls handed to the backend, the
// communicator or a bucket, and the finite check after them. Member definitions of rank_program
// (runtime/executor.hpp).
#include <cstddef>
#include <string>
#include <string_view>

#include "shardgraph/runtime/executor.hpp"

namespace shardgraph {

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::run_segment(const segment& sg) {
  const graph_view& g = program_.nodes;
  const std::int64_t first = sg.first_layer, end = sg.end_layer < 0 ? layers_ : sg.end_layer;
  std::size_t loop_start = 0;
  layer_ = first;
  in_backward_ = !sg.pre && !sg.forward_block && !sg.post;
  if (sg.zero_tail_input) fill_zero_value(step_index_.backward_end_node);
  if (zero3_ && !pipelined()) gather_unlayered_parameters();  // a pipeline gathers once per step
  for (std::size_t s = 0; s < program_.steps.size(); ++s) {
    const phase ph = phase_of(s);
    if (!runs(sg, ph)) {
      if (ph == phase::forward_block) s = index(step_index_.forward_end_step);
      if (ph == phase::backward_block) s = index(step_index_.backward_end_step);
      continue;
    }
    const step& st = program_.steps[s];
    const node& n = g[st.node];
    switch (st.kind) {
      case step_kind::loop_begin: {
        loop_start = s;
        layer_ = n.reverse ? end - 1 : first;
        if (zero3_) zero3_.gather_layer(backend_, channels(), st.node, layer_, n.reverse, first, end);
        const bool received = n.reverse ? sg.receive_backward_input : sg.receive_forward_input;
        if (!received) {
          buffer& input = value(n.inputs[0]);
          if (&input != &value(st.node)) backend_.copy(input, value(st.node));  // else written there
        }
        if (n.reverse) recompute_layer();
        break;
      }
      case step_kind::loop_end: {
        buffer& result = value(n.inputs[0]);  // before the layer changes: it may be a per-layer value
        const bool reverse = g[n.region].reverse;
        const bool more = reverse ? layer_ > first : layer_ + 1 < end;
        if (more) {
          layer_ += reverse ? -1 : 1;
          if (zero3_) zero3_.wait_for_layer(channels(), layer_);
          if (zero3_)
            zero3_.prefetch(backend_, channels(), n.region, layer_ + (reverse ? -1 : 1), first, end);
          buffer& next_input = value(n.region);
          if (&next_input != &result) backend_.copy(result, next_input);  // else written there already
          s = loop_start;
          if (reverse) recompute_layer();
        } else if (&result != &value(st.node)) {  // else the last layer wrote it there
          backend_.copy(result, value(st.node));
        }
        break;
      }
      default:
        run_step(s);
    }
  }
  if (zero3_ && !pipelined()) release_unlayered_parameters();
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::run_step(std::size_t s) {
  try {
    for (const plan::bound_call& c : calls_.of_step(s)) run_call(c);
  } catch (const error& e) {
    const std::string_view prefix = "shardgraph: ", message = e.what();
    if (message.starts_with(std::string(prefix) + "forward: ")) throw;  // located already
    throw error(std::string(prefix) + located(program_.steps[s].node) + ": " +
                std::string(message.starts_with(prefix) ? message.substr(prefix.size()) : message));
  }
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
std::string rank_program<Backend, Comm>::located(int i) const {
  const node& n = program_.nodes[i];
  std::string where = "forward: " + std::string(op_name(n)) + " '" + std::string(n.name.view()) + "'";
  if (n.body() >= 0) where += " in layer " + std::to_string(layer_);
  return where + " on rank " + std::to_string(world_rank_);
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::run_call(const plan::bound_call& c) {
  switch (c.kind) {
    case plan::call_kind::kernel:
    case plan::call_kind::batched:
    case plan::call_kind::elementwise:
      runner().kernel(c, [this](int v) -> buffer& { return value(v); },
                      [this](int v) -> buffer& {  // the statistics saved with v's memory (plan/saved_statistics.hpp)
                        const plan::value_place at = memory_.place_of(v, layer_);
                        return storage_.saved_at(at.node, at.layer);
                      });
      in_backward_ = in_backward_ || c.scalar_is_loss_scale;  // the seed of backward ran
      break;
    case plan::call_kind::collective:
      runner().collective(c, axis_comms_[index(c.axis)], value(c.in[0]), value(c.out), storage_.staging(c.node));
      break;
    case plan::call_kind::bucket_add:
      buckets_.add(backend_, channels(), c.node, layer_, value(c.in[0]), gradient_at());
      break;
    case plan::call_kind::slice:
      backend_.slice(value(c.in[0]), value(c.out), c.blocks[0], c.slice_index);
      break;
    case plan::call_kind::copy:
    case plan::call_kind::output:
      backend_.copy(value(c.in[0]), value(c.out));
      break;
    case plan::call_kind::gradient_sum:
      sum_gradient(value(c.in[0]), value(c.out));
      break;
  }
  for (const plan::checked_value& v : c.checked) check_finite(v.node, v.reported);
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::sum_gradient(buffer& from, buffer& to) {
  if constexpr (requires(Backend & b, buffer & x) { b.add_scaled(x, x, 1.0); })
    backend_.add_scaled(from, to, 1.0);
  else
    fail("executor: pipeline", "this backend has no add_scaled() to sum gradients over micro-batches",
         "use a TrainingBackend (compute/compute_backend.hpp) for pipeline stages");
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::check_finite(int i, int reported) {
  if (!finite_check_ || !is_floating(program_.nodes[i].type) || (in_backward_ && loss_scale_ != 1.0))
    return;
  if constexpr (requires(Backend & b, const buffer& v) {
                  { b.all_finite(v) } -> std::convertible_to<bool>;
                }) {
    if (backend_.all_finite(value(i))) return;
    fail(located(reported >= 0 ? reported : i),
         "produced a NaN or an infinity (the first op to do so on this rank)",
         "lower the learning rate, clip gradients, or check the inputs and weights feeding this op");
  }
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
void rank_program<Backend, Comm>::fill_zero(buffer& b) {
  if constexpr (requires(Backend & be, buffer & x) { be.fill_zero(x); })
    backend_.fill_zero(b);
  else
    fail("executor: pipeline", "this backend has no fill_zero()",
         "use a TrainingBackend (compute/compute_backend.hpp) for pipeline stages");
}
}  // namespace shardgraph
