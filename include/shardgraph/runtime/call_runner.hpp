#pragma once
// call_runner: makes one bound call (plan/bound_call.hpp) on a compute backend and a communicator.
// The call says what to do; the runner only turns its value references into buffers, through
// `value_of(node) -> buffer&` (the executor's buffer of that node in the running layer) and
// `saved_of(node) -> buffer&` (the statistics saved with that value), and takes the run-time
// quantities a call names (a mean loss's divisor, the loss scale, dropout's step and layer).
//
//   call_runner<Backend, Comm> run{backend, lowering, rope, divisors, loss_scale, dropout, layer};
//   run.kernel(call, value_of, saved_of);             // kernel, batched, elementwise
//   run.collective(call, group, value_of, staging);   // all_reduce, all_gather, reduce_scatter, all_to_all
//
// Each call builds its kernel_call in place and hands it to the backend through `lowering`, which
// lowers the fused kinds the backend does not run (compute/lower_fused.hpp); a batched product checks
// that its operands lie at one stride (they are addresses, known here only) and else runs its
// products one by one.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shardgraph/comm/communicator.hpp"
#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/compute/lower_fused.hpp"
#include "shardgraph/plan/backend_traits.hpp"
#include "shardgraph/plan/bound_call.hpp"
#include "shardgraph/runtime/axis_channels.hpp"
#include "shardgraph/runtime/custom_kernel_call.hpp"
#include "shardgraph/runtime/rope_plan.hpp"

namespace shardgraph {

// The buffer's memory, for a communicator. It reads and writes that memory directly, so the work
// a GPU backend has queued on its stream must be finished first.
template <class T, class Backend>
std::span<T> host_span(Backend& backend, typename Backend::buffer& b, std::int64_t numel) {
  if constexpr (requires(Backend & be) { be.synchronize(); }) backend.synchronize();
  return {static_cast<T*>(backend.data(b)), static_cast<std::size_t>(numel)};
}

template <compute::ComputeBackend Backend, comm::Communicator Comm>
struct call_runner {
  using buffer = typename Backend::buffer;
  using kernel_call = compute::kernel_call<buffer>;

  Backend& backend;
  compute::fused_lowering<Backend>& lowering;
  const rope_plan& rope;
  std::span<const std::int64_t> loss_divisors;  // this run's counted targets, per targets input
  double loss_scale = 1.0;
  compute::dropout_run dropout{};  // this run's: whether dropout acts, and its step
  std::int64_t layer = 0;          // the repeat block's running layer

  static constexpr compute::fused_set runs = compute::fused_kinds_run_by<Backend>();

  // A kernel, batched or elementwise call.
  template <class ValueOf, class SavedOf>
  void kernel(const plan::bound_call& c, ValueOf&& value_of, SavedOf&& saved_of) {
    if (c.kind == plan::call_kind::elementwise) return backend.run(elementwise_call(c, value_of));
    if (c.kernel == op::custom) return run_custom_call(backend, c, value_of);
    kernel_call call = resolved(c, value_of, saved_of);
    if constexpr (plan::finds_strides<Backend>()) {
      if (c.kind == plan::call_kind::batched) return batched(c, call, value_of, saved_of);
    }
    lowering.run(backend, call, runs);
  }

  // c's kernel_call, its value references resolved.
  template <class ValueOf, class SavedOf>
  kernel_call resolved(const plan::bound_call& c, ValueOf& value_of, SavedOf& saved_of) const {
    const auto at = [&](int v) { return v >= 0 ? &value_of(v) : nullptr; };
    kernel_call call;
    call.kind = c.kernel;
    call.type = c.type;
    call.out = &value_of(c.out);
    for (int k = 0; k < c.input_count; ++k) call.in[k] = &value_of(c.in[static_cast<std::size_t>(k)]);
    for (std::size_t k = 0; k < c.dims.size(); ++k) call.dims[k] = c.dims[k];
    if (c.divisor_entry >= 0 && static_cast<std::size_t>(c.divisor_entry) < loss_divisors.size())
      call.dims[3] = loss_divisors[static_cast<std::size_t>(c.divisor_entry)];
    call.scalar = c.scalar_is_loss_scale ? loss_scale : c.scalar;
    call.transpose_b = c.transpose_b;
    call.masking = c.masking;
    if (c.uses_rope) call.rope = rope.of(c.node);
    if (c.kernel == op::dropout) call.dropout = dropout_of(c);
    call.bias = at(c.bias);
    call.bias_grad = at(c.bias_grad);
    call.side = at(c.side);
    call.logits_grad = at(c.logits_grad);
    call.key_grad = at(c.key_grad);
    call.value_grad = at(c.value_grad);
    call.weight_grad = at(c.weight_grad);
    if (c.saved >= 0) call.saved = &saved_of(c.saved);
    call.epilogue = c.epilogue;
    call.token_major = c.token_major;
    call.output_kept = c.output_kept;
    return call;
  }

  // A dropout call's mask: bind's fields, this run's step, and the running layer inside a block.
  compute::dropout_mask dropout_of(const plan::bound_call& c) const {
    compute::dropout_mask m = c.dropout;
    m.run = dropout;
    if (m.layer > 0) m.layer = 1 + layer;
    return m;
  }

  // One kernel for an elementwise chain.
  template <class ValueOf>
  static kernel_call elementwise_call(const plan::bound_call& c, ValueOf& value_of) {
    kernel_call call;
    call.kind = c.kernel;
    call.type = c.type;
    call.out = &value_of(c.out);
    call.dims[0] = c.dims[0];
    for (int k = 0; k < c.operand_count; ++k) call.operands[k] = &value_of(c.operands[static_cast<std::size_t>(k)]);
    call.operand_count = c.operand_count;
    for (int k = 0; k < c.chain_length; ++k) call.chain[k] = c.chain[static_cast<std::size_t>(k)];
    call.chain_length = c.chain_length;
    return call;
  }

  // A product and those batched with it: one batched call where each operand's products lie at
  // one stride from the first's (bind places them so), else each call in turn.
  template <class ValueOf, class SavedOf>
  void batched(const plan::bound_call& c, kernel_call& call, ValueOf& value_of, SavedOf& saved_of) {
    std::vector<kernel_call> calls{call};
    for (const plan::bound_call& b : c.batched) calls.push_back(resolved(b, value_of, saved_of));
    const auto operand = [](const kernel_call& k, int which) -> const buffer* {
      return which == 0 ? k.in[1] : which == 1 ? k.out : k.bias != nullptr ? k.bias : k.bias_grad;
    };
    bool strided = true;
    for (int k = 0; k < 3 && strided; ++k) {
      const buffer* first = operand(call, k);
      if (first == nullptr) continue;
      const std::ptrdiff_t element = static_cast<std::ptrdiff_t>(dtype_size(first->type()));
      const auto at = [&](std::size_t b) {
        return static_cast<const std::byte*>(Backend::address(*operand(calls[b], k)));
      };
      const std::ptrdiff_t stride = at(1) - at(0);
      strided =
          stride > 0 && stride % element == 0 && stride >= static_cast<std::ptrdiff_t>(first->size_bytes());
      for (std::size_t b = 2; b < calls.size() && strided; ++b) strided = at(b) - at(b - 1) == stride;
      call.batch_strides[k] = stride / element;
    }
    if (!strided) {
      for (const kernel_call& k : calls) lowering.run(backend, k, runs);
      return;
    }
    call.batch = static_cast<std::int64_t>(calls.size());
    lowering.run(backend, call, runs);
  }

  // A collective over `group` (c.parts ranks): the block moves around the communicator's call,
  // through the node's staging buffers (one; all_to_all: two).
  void collective(const plan::bound_call& c, Comm& group, buffer& in, buffer& out, std::vector<buffer>& staging) {
    detail::with_element_type(c.type, [&](auto zero) {
      using T = decltype(zero);
      switch (c.kernel) {
        case op::all_reduce:
          backend.copy(in, out);
          group.all_reduce(host_span<T>(backend, out, c.out_numel));
          break;
        case op::all_gather:
          group.all_gather(std::span<const T>(host_span<T>(backend, in, c.in_numel)),
                           host_span<T>(backend, staging[0], c.in_numel * c.parts));
          backend.interleave(staging[0], out, c.blocks[0]);
          break;
        case op::reduce_scatter:
          backend.deinterleave(in, staging[0], c.blocks[0]);
          group.reduce_scatter(std::span<const T>(host_span<T>(backend, staging[0], c.in_numel)),
                               host_span<T>(backend, out, c.out_numel));
          break;
        case op::all_to_all:
          backend.deinterleave(in, staging[0], c.blocks[0]);
          group.all_to_all(std::span<const T>(host_span<T>(backend, staging[0], c.in_numel)),
                           host_span<T>(backend, staging[1], c.in_numel));
          backend.interleave(staging[1], out, c.blocks[1]);
          break;
        default:
          break;
      }
    });
  }
};

}  // namespace shardgraph
