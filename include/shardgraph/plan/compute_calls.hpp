#pragma once
// compute_calls: the bound calls of a compute or fused step: one kernel call of the node's op with
// the operands the fusion plan gives it (plan/step_fusion.hpp), a batched product, or one kernel for
// an elementwise chain. Pure functions of the program, the layout, the sizes and the fusion plan.
//
//   bound_call c = plan::kernel_call_of(in, i);   // linear with its bias epilogue: out = the add_bias
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "shardgraph/plan/bound_call.hpp"
#include "shardgraph/plan/kernel_dims.hpp"
#include "shardgraph/plan/step_fusion.hpp"

namespace shardgraph::plan {

// What the compute calls read.
struct compute_call_inputs {
  shardgraph::program_view program;
  const local_layout& layout;
  const model_sizes& sizes;
  const step_fusion& fused;
  std::span<const int> divisor_entry;  // per node: a mean loss's targets input among the counted (-1)
  bool seed_is_one = true;             // the backward's seed is 1 (no loss scale)
};

namespace detail {

inline std::size_t node_at(int i) { return static_cast<std::size_t>(i); }

// The operands the fusion plan adds to node i's call (kernel_call's comments say what each is).
inline void set_fused_operands(const compute_call_inputs& in, int i, bound_call& c) {
  const step_fusion& f = in.fused;
  const std::size_t at = node_at(i);
  if (in.program.nodes[i].kind == op::linear && f.bias_epilogue_of[at] >= 0) {
    const int j = f.bias_epilogue_of[at];
    c.out = j;
    c.bias = in.program.nodes[j].inputs[1];
  }
  if (f.bias_grad_of[at] >= 0) c.bias_grad = f.bias_grad_of[at];
  if (f.key_grad_of[at] >= 0) {
    c.key_grad = f.key_grad_of[at];
    c.value_grad = f.value_grad_of[at];
  }
  if (const int w = f.weight_grad_of[at]; w >= 0) {  // and its bias gradient, if paired
    c.weight_grad = w;
    if (f.bias_grad_of[node_at(w)] >= 0) c.bias_grad = f.bias_grad_of[node_at(w)];
  }
  c.token_major = f.token_major[at];
  c.output_kept = f.output_kept[at];
  if (in.seed_is_one && f.logits_grad_of[at] >= 0) c.logits_grad = f.logits_grad_of[at];
  if (f.forward_output_of[at] >= 0) c.side = f.forward_output_of[at];
  // Saved statistics live with the attention's result, or with the cross-entropy's logits.
  const node& n = in.program.nodes[i];
  const int forward = c.output_kept ? i : f.forward_output_of[at];
  const bool loss = n.kind == op::cross_entropy || n.kind == op::cross_entropy_grad;
  if (forward >= 0) c.saved = loss ? n.inputs[0] : forward;
  if (const step_fusion::epilogue& e = f.epilogue_of[at]; e.out >= 0) {
    c.epilogue = e.kind;
    c.out = e.out;
    c.side = e.side;
  }
}

}  // namespace detail

// Node i's kernel call: its op, its operands (with those the fusion plan adds), its dims.
inline bound_call kernel_call_of(const compute_call_inputs& in, int i) {
  const node& n = in.program.nodes[i];
  bound_call c;
  c.kind = call_kind::kernel;
  c.node = i;
  c.kernel = n.kind;
  c.type = n.type;
  c.out = i;
  c.scalar = n.scalar;
  c.transpose_b = n.transpose_b;
  c.masking = n.masking;
  c.uses_rope = n.kind == op::rope || n.kind == op::rope_grad;
  c.input_count = n.input_count;
  for (int k = 0; k < n.input_count; ++k) c.in[detail::node_at(k)] = n.inputs[k];
  detail::set_fused_operands(in, i, c);
  c.dims = kernel_dims(in.program, in.layout, in.sizes, i);
  if ((n.kind == op::cross_entropy || n.kind == op::cross_entropy_grad) && n.reduction != loss_reduction::sum &&
      detail::node_at(i) < in.divisor_entry.size())
    c.divisor_entry = in.divisor_entry[detail::node_at(i)];
  c.scalar_is_loss_scale = n.kind == op::ones;  // the seed of backward: d loss / d loss, times the scale
  if (n.kind == op::dropout) c.dropout = dropout_mask_of(n, in.layout.of(i));
  if (n.kind == op::custom) {
    c.custom = n.custom;
    c.custom_shapes.push_back(in.layout.of(i).local);
    for (int k = 0; k < n.input_count; ++k) c.custom_shapes.push_back(in.layout.of(n.inputs[k]).local);
  }
  return c;
}

// The fused kinds of call c, from its operands.
inline compute::fused_set fused_kinds_of(const bound_call& c) {
  return compute::fused_kinds_of(c, c.kernel, [](int v) { return v >= 0; }, c.kind == call_kind::batched);
}

// One kernel for the elementwise chain [first, last] (compute::elementwise_step); none when the
// chain is one add_bias whose product added the bias (plan_bias_epilogues).
inline std::optional<bound_call> elementwise_call_of(const compute_call_inputs& in, int first, int last) {
  const graph_view& g = in.program.nodes;
  // The chain's start: its first node's input, or that node's own value when the product before
  // it has added the bias.
  const bool bias_done = in.fused.bias_done_by_product[detail::node_at(first)];
  if (bias_done && first == last) return std::nullopt;
  bound_call c;
  c.kind = call_kind::elementwise;
  c.node = last;
  c.kernel = g[last].kind;
  c.type = g[last].type;
  c.out = last;
  c.dims[0] = in.layout.of(last).numel();
  c.operands[detail::node_at(c.operand_count++)] = bias_done ? first : g[first].inputs[0];
  for (int j = bias_done ? first + 1 : first; j <= last; ++j) {
    const node& n = g[j];
    compute::elementwise_step s{n.kind, -1, 0};
    int other = -1;
    if (j == first)
      other = n.input_count > 1 ? n.inputs[1] : -1;
    else if (n.input_count > 1)
      other = n.inputs[0] == j - 1 ? n.inputs[1] : n.inputs[0];
    if (other >= 0) {
      s.operand = c.operand_count;
      c.operands[detail::node_at(c.operand_count++)] = other;
      if (n.kind == op::add_bias) s.period = in.layout.of(other).numel();
    }
    c.chain[detail::node_at(c.chain_length++)] = s;
  }
  return c;
}

// The finite checks after node i's call: the other values it writes, then its own.
inline std::vector<checked_value> checked_after(const compute_call_inputs& in, int i) {
  std::vector<checked_value> checked;
  const auto add = [&](int v, int reported) {
    if (is_floating(in.program.nodes[v].type)) checked.push_back({v, reported >= 0 ? reported : v});
  };
  for (const step_fusion::written_value& w : in.fused.written_by(i, in.seed_is_one)) add(w.node, w.reported);
  add(i, i);
  return checked;
}

// The calls of compute step i (none when another node's call writes it).
inline std::vector<bound_call> compute_step_calls(const compute_call_inputs& in, int i) {
  if (!in.fused.runs(i, in.seed_is_one)) return {};
  std::optional<bound_call> c;
  if (is_elementwise(in.program.nodes[i].kind)) {
    c = elementwise_call_of(in, i, i);
  } else {
    c = kernel_call_of(in, i);
    for (int j : in.fused.batched_with[detail::node_at(i)]) c->batched.push_back(kernel_call_of(in, j));
    if (!c->batched.empty()) c->kind = call_kind::batched;
    c->fused = fused_kinds_of(*c);
  }
  if (!c) return {};
  c->checked = checked_after(in, i);
  return {std::move(*c)};
}

// The calls of the fused step [first, last].
inline std::vector<bound_call> fused_step_calls(const compute_call_inputs& in, int first, int last) {
  if (!in.fused.runs(last, in.seed_is_one)) return {};
  std::optional<bound_call> c = elementwise_call_of(in, first, last);
  if (!c) return {};
  if (is_floating(in.program.nodes[last].type)) c->checked.push_back({last, last});
  return {std::move(*c)};
}

}  // namespace shardgraph::plan
