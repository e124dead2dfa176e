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
  }
  return "?";
}

constexpr bool is_collective(op o) {
  return o == op::all_reduce || o == op::all_gather || o == op::reduce_scatter || o == op::all_to_all;
}
constexpr bool is_redistribution(op o) { return is_collective(o) || o == op::local_slice; }
constexpr bool is_leaf(op o) { return o == op::input || o == op::parameter; }
// Ops computed element by element, which fuse can merge into one kernel.
constexpr bool is_elementwise(op o) {
  return o == op::add || o == op::mul || o == op::add_bias || o == op::gelu || o == op::silu;
}

}  // namespace shardgraph
