#pragma once
// The operations of the IR: user-facing compute ops, structure markers, and the communication
// steps that insert_collectives adds where a placement changes.
#include <cstdint>
#include <string_view>

namespace shardgraph {

enum class op : std::uint8_t {
  // leaves
  input, parameter,
  // compute
  embedding, position_embedding, linear, matmul, add, mul, add_bias, gelu, silu,
  layer_norm, rms_norm, rope, split_heads, merge_heads, attention, softmax, cross_entropy,
  // structure
  output, repeat_begin, repeat_end, redistribute,
  // communication (inserted by insert_collectives) and its local counterpart
  all_reduce, all_gather, reduce_scatter, all_to_all, local_slice,
  // gradients (emitted by autodiff)
  transpose, linear_weight_grad, bias_grad, gelu_grad, silu_grad, layer_norm_grad_x, layer_norm_grad_w,
  rms_norm_grad_x, rms_norm_grad_w, rope_grad, attention_grad_q, attention_grad_k, attention_grad_v,
  softmax_grad, embedding_grad, position_embedding_grad, cross_entropy_grad, ones, param_grad,
  // a cross-entropy over logits whose vocabulary is sharded (added by split_vocab_parallel_loss)
  vocab_statistics, vocab_exp_sum, vocab_log_sum_exp,
  // activations beyond GPT's (compute, elementwise) and their gradients (x, dy) -> dx
  relu, gelu_erf, relu_grad, gelu_erf_grad,
  // layout: the dimensions of a tensor permuted (node::permutation); its own gradient
  permute,
  // combining and reducing along one dimension (node::along): parts joined, a range taken, a
  // dimension summed or averaged away; slice_grad (dy placed in zeros) and broadcast (the
  // reductions' gradient) are their gradients
  concat, slice, slice_grad, sum, mean, broadcast,
  // convolutions as products (dsl/convolution.hpp): the layouts that gather each window's inputs
  // into a row (node::window), and their gradients, the inverse layouts
  patchify, unpatchify, unfold1d, fold1d,
  // user-defined ops (ir/custom_op.hpp): the node's `custom` descriptor says what it computes
  custom,
  // CLIP's activation x sigmoid(1.702 x) (compute, elementwise) and its gradient (x, dy) -> dx
  quick_gelu, quick_gelu_grad,
  // dropout (compute/dropout_mask.hpp): its own gradient, on dy with the same mask
  dropout,
  // generation (passes/attach_kv_cache.hpp): an attention that writes this step's keys and values
  // into a KV cache and attends over the cached ones
  cached_attention,
};

constexpr std::string_view op_name(op o) {
  switch (o) {
    case op::input: return "input";
    case op::parameter: return "parameter";
    case op::embedding: return "embedding";
    case op::position_embedding: return "position_embedding";
    case op::linear: return "linear";
    case op::matmul: return "matmul";
    case op::add: return "add";
    case op::mul: return "mul";
    case op::add_bias: return "add_bias";
    case op::gelu: return "gelu";
    case op::silu: return "silu";
    case op::layer_norm: return "layer_norm";
    case op::rms_norm: return "rms_norm";
    case op::rope: return "rope";
    case op::split_heads: return "split_heads";
    case op::merge_heads: return "merge_heads";
    case op::attention: return "attention";
    case op::softmax: return "softmax";
    case op::cross_entropy: return "cross_entropy";
    case op::output: return "output";
    case op::repeat_begin: return "repeat_begin";
    case op::repeat_end: return "repeat_end";
    case op::redistribute: return "redistribute";
    case op::all_reduce: return "all_reduce";
    case op::all_gather: return "all_gather";
    case op::reduce_scatter: return "reduce_scatter";
    case op::all_to_all: return "all_to_all";
    case op::local_slice: return "local_slice";
    case op::transpose: return "transpose";
    case op::linear_weight_grad: return "linear_weight_grad";
    case op::bias_grad: return "bias_grad";
    case op::gelu_grad: return "gelu_grad";
    case op::silu_grad: return "silu_grad";
    case op::layer_norm_grad_x: return "layer_norm_grad_x";
    case op::layer_norm_grad_w: return "layer_norm_grad_w";
    case op::rms_norm_grad_x: return "rms_norm_grad_x";
    case op::rms_norm_grad_w: return "rms_norm_grad_w";
    case op::rope_grad: return "rope_grad";
    case op::attention_grad_q: return "attention_grad_q";
    case op::attention_grad_k: return "attention_grad_k";
    case op::attention_grad_v: return "attention_grad_v";
    case op::softmax_grad: return "softmax_grad";
    case op::embedding_grad: return "embedding_grad";
    case op::position_embedding_grad: return "position_embedding_grad";
    case op::cross_entropy_grad: return "cross_entropy_grad";
    case op::ones: return "ones";
    case op::param_grad: return "param_grad";
    case op::vocab_statistics: return "vocab_statistics";
    case op::vocab_exp_sum: return "vocab_exp_sum";
    case op::vocab_log_sum_exp: return "vocab_log_sum_exp";
    case op::relu: return "relu";
    case op::gelu_erf: return "gelu_erf";
    case op::relu_grad: return "relu_grad";
    case op::gelu_erf_grad: return "gelu_erf_grad";
    case op::permute: return "permute";
    case op::concat: return "concat";
    case op::slice: return "slice";
    case op::slice_grad: return "slice_grad";
    case op::sum: return "sum";
    case op::mean: return "mean";
    case op::broadcast: return "broadcast";
    case op::patchify: return "patchify";
    case op::unpatchify: return "unpatchify";
    case op::unfold1d: return "unfold1d";
    case op::fold1d: return "fold1d";
    case op::custom: return "custom";
    case op::quick_gelu: return "quick_gelu";
    case op::quick_gelu_grad: return "quick_gelu_grad";
    case op::dropout: return "dropout";
    case op::cached_attention: return "cached_attention";
  }
  return "?";
}

constexpr bool is_collective(op o) {
  return o == op::all_reduce || o == op::all_gather || o == op::reduce_scatter || o == op::all_to_all;
}
constexpr bool is_redistribution(op o) { return is_collective(o) || o == op::local_slice; }
// The ops along one dimension (node::along).
constexpr bool is_along_dimension(op o) {
  return o == op::concat || o == op::slice || o == op::slice_grad || o == op::sum || o == op::mean ||
         o == op::broadcast;
}
constexpr bool is_leaf(op o) { return o == op::input || o == op::parameter; }
// Ops computed element by element, which fuse can merge into one kernel.
constexpr bool is_elementwise(op o) {
  return o == op::add || o == op::mul || o == op::add_bias || o == op::gelu || o == op::silu ||
         o == op::relu || o == op::gelu_erf || o == op::quick_gelu;
}

}  // namespace shardgraph
