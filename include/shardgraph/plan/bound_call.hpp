#pragma once
// bound_call: one call a step of a rank's program makes, as a plain value that plan_calls
// (plan/call_list.hpp) writes at bind and the executor hands to the backend or the communicator.
//
//   for (const plan::bound_call& c : calls.of_step(s)) ...   // an empty list: the step makes no call
//
// Operands are value references: node ids, which the executor resolves to the buffer of the layer
// that runs (the memory plan's place_of). Everything that sizes alone decide is here: the kernel's
// dims, the elementwise chain, a collective's block layouts, a slice's block. Two quantities are
// known only when the call runs, and each call names where it takes them from:
//   - a mean loss's divisor (dims[3] of cross_entropy and cross_entropy_grad) is the run's count of
//     targets number `divisor_entry` when the run counted it (else dims[3], every row);
//   - the seed of backward (`ones`) writes the run's loss scale (`scalar_is_loss_scale`).
#include <array>
#include <cstdint>
#include <vector>

#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/core/dtype.hpp"
#include "shardgraph/ir/node.hpp"

namespace shardgraph::plan {

enum class call_kind : std::uint8_t {
  kernel,        // one kernel call (compute::kernel_call) of `node`'s op, with its fused kinds' operands
  batched,       // a product and `batched` (same sizes, same first input): one call where strided
  elementwise,   // one kernel for the chain of elementwise nodes ending at `node` (chain, operands)
  collective,    // `node`'s all_reduce, all_gather, reduce_scatter or all_to_all over `axis`
  bucket_add,    // the gradient `in[0]` handed to the bucket of `node` (the all_reduce or param_grad)
  slice,         // `node` = block `slice_index` of `in[0]` along blocks[0] (a Shard of a Replicate)
  copy,          // `node` = `in[0]` (a copy step, or a collective over one rank)
  gradient_sum,  // `node` += `in[0]`: a pipeline stage's param_grad, summed over micro-batches
  output,        // the output `node` = `in[0]`, which forward() returns
};

inline constexpr const char* call_kind_name(call_kind k) {
  switch (k) {
    case call_kind::kernel:
      return "kernel";
    case call_kind::batched:
      return "batched";
    case call_kind::elementwise:
      return "elementwise";
    case call_kind::collective:
      return "collective";
    case call_kind::bucket_add:
      return "bucket_add";
    case call_kind::slice:
      return "slice";
    case call_kind::copy:
      return "copy";
    case call_kind::gradient_sum:
      return "gradient_sum";
    case call_kind::output:
      return "output";
  }
  return "?";
}

// A value the finite check reads after the call (bind's set_finite_check), and the node it names.
struct checked_value {
  int node = -1;
  int reported = -1;
  friend bool operator==(const checked_value&, const checked_value&) = default;
};

struct bound_call {
  static constexpr int none = -1;  // an operand the call does not have

  call_kind kind = call_kind::kernel;
  int node = -1;        // the node the call is for: errors name it
  op kernel = op::add;  // kernel_call::kind (an elementwise chain: its last op; a collective: its op)
  dtype type = dtype::f32;

  // Value references (node ids, `none` where absent), as kernel_call names them.
  int out = none;
  std::array<int, max_inputs> in{none, none, none, none, none};
  int input_count = 0;
  int bias = none, bias_grad = none, side = none, logits_grad = none;
  int key_grad = none, value_grad = none, weight_grad = none;
  // The value whose saved statistics the call writes or reads (fused::attention_saved: the
  // attention's result; cross_entropy_saved: the logits): they live with that value's memory.
  int saved = none;

  // kernel, batched: the fused kinds of the call (compute/fused_kinds.hpp), from its operands.
  compute::fused_set fused;
  // kernel: what kernel_call carries besides its buffers.
  std::array<std::int64_t, 6> dims{};
  double scalar = 0.0;
  bool transpose_b = false;
  attention_masking masking;
  bool token_major = false;
  bool output_kept = false;
  compute::product_epilogue epilogue = compute::product_epilogue::none;
  bool uses_rope = false;             // rope, rope_grad: the node's frequency table (rope_plan)
  int divisor_entry = none;           // a mean loss: dims[3] is the run's count of this targets input
  bool scalar_is_loss_scale = false;  // ones: scalar is the run's loss scale; the backward starts
  compute::dropout_mask dropout;      // dropout: its run (active, step) and layer are the run's

  // batched: the products run in the same call as this one (each as its own kernel call), in order.
  std::vector<bound_call> batched;

  // elementwise: value = chain[k](value, operands[chain[k].operand]), starting from operands[0].
  std::array<compute::elementwise_step, compute::max_chain> chain{};
  int chain_length = 0;
  std::array<int, compute::max_chain + 1> operands{};
  int operand_count = 0;

  // collective and slice: the mesh axis, its number of ranks, and the block moves around the
  // communicator's call (all_gather: blocks[0] interleaves the staged parts; reduce_scatter:
  // blocks[0] deinterleaves the input; all_to_all: blocks[0] splits the input, blocks[1]
  // interleaves what is received; slice: blocks[0], keeping block slice_index).
  int axis = -1;
  int parts = 1;
  std::array<compute::block_layout, 2> blocks{};
  std::int64_t in_numel = 0, out_numel = 0;
  std::int64_t slice_index = 0;

  // kernel of op::custom: the op, and the local shapes of the output then each input.
  const custom_op* custom = nullptr;
  std::vector<std::vector<std::int64_t>> custom_shapes;

  // The values the finite check reads after the call, in order (floating-point values only).
  std::vector<checked_value> checked;
};

}  // namespace shardgraph::plan
