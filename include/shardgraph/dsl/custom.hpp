#pragma once
// Ops of the user's own: a type states the op, apply<Op> records it.
//
//   struct scaled_tanh {                                   // y = tanh(x * s), s the op's attribute
//     static constexpr std::string_view name = "scaled_tanh";
//     static constexpr int inputs = 1;
//     static constexpr std::string_view sharding = "b s d -> b s d";   // ir/sharding_rule.hpp
//     static constexpr shardgraph::shape_result output_shape(std::span<const shardgraph::shape> in) {
//       return in[0];                                      // or shardgraph::shape_error(why, how)
//     }
//     static constexpr void backward(shardgraph::custom_gradient& g);  // optional (ir/custom_gradient.hpp)
//     static void cpu(const shardgraph::custom_call& c);               // compute/custom_call.hpp
//     static constexpr shardgraph::custom_kernel kernels[] = {{"cpu", &cpu}};
//   };
//   tensor y = shardgraph::apply<scaled_tanh>({x}, 2.0);                // a node named "<scope>.scaled_tanh"
//
// output_shape may return a shape or a shape_result. Without `backward` the op is forward only:
// a loss that depends on it is a compile error naming it. A malformed sharding rule is a compile
// error naming the op and the rule.
#include <initializer_list>
#include <string_view>

#include "shardgraph/compute/custom_call.hpp"
#include "shardgraph/core/constexpr_fail.hpp"
#include "shardgraph/ir/builder.hpp"
#include "shardgraph/ir/compile_error.hpp"
#include "shardgraph/ir/custom_gradient.hpp"
#include "shardgraph/ir/custom_op.hpp"

namespace shardgraph {

template <class Op>
concept custom_op_type = requires {
  { Op::name } -> std::convertible_to<std::string_view>;
  { Op::inputs } -> std::convertible_to<int>;
  { Op::sharding } -> std::convertible_to<std::string_view>;
};

namespace detail {

template <class Op>
constexpr shape_result custom_shape_of(std::span<const shape> inputs) {
  return Op::output_shape(inputs);
}
template <class Op>
constexpr void custom_backward_of(custom_gradient& g) {
  Op::backward(g);
}

// "shardgraph: custom op '<name>': sharding rule "<rule>": <why>. <how>", or empty.
template <class Op>
consteval diagnostic custom_op_problem() {
  diagnostic d;
  const sharding_rule rule = parse_sharding_rule(Op::sharding);
  const std::string_view where_start = "shardgraph: custom op '";
  if (rule.error != nullptr) {
    d << where_start << Op::name << "': sharding rule \"" << Op::sharding << "\": " << rule.error;
  } else if (rule.input_count != Op::inputs) {
    d << where_start << Op::name << "': sharding rule \"" << Op::sharding << "\": it names " << rule.input_count
      << " inputs but the op takes " << Op::inputs << ". name each input's dimensions, separated by ','";
  }
  return d;
}

template <class Op>
consteval custom_op make_custom_op() {
  static_assert(report_compile_error<custom_op_problem<Op>()>(),
                "shardgraph: custom op: the op's sharding rule is malformed, shown above");
  custom_op c;
  c.name = Op::name;
  c.input_count = Op::inputs;
  c.rule = parse_sharding_rule(Op::sharding);
  c.output_shape = &custom_shape_of<Op>;
  if constexpr (requires(custom_gradient& g) { Op::backward(g); }) c.backward = &custom_backward_of<Op>;
  if constexpr (requires { Op::kernels; }) c.kernels = std::span<const custom_kernel>(Op::kernels);
  return c;
}

}  // namespace detail

// The descriptor of Op, which its nodes point at.
template <custom_op_type Op>
inline constexpr custom_op custom_op_of = detail::make_custom_op<Op>();

// Records Op applied to `inputs` (Op::inputs tensors), with `attribute` in the node's scalar.
template <custom_op_type Op>
constexpr tensor apply(std::initializer_list<tensor> inputs, double attribute = 0.0, std::string_view name = {}) {
  static_assert(max_inputs == 5, "the message below names max_inputs");
  if (inputs.size() == 0 || inputs.size() > static_cast<std::size_t>(max_inputs))
    constexpr_fail("shardgraph: apply: a custom op takes 1 to 5 inputs (max_inputs). pass the op's inputs as {x, ...}");
  node n;
  n.kind = op::custom;
  n.custom = &custom_op_of<Op>;
  n.scalar = attribute;
  graph_builder* b = inputs.begin()->builder;
  for (tensor t : inputs) n.inputs[n.input_count++] = t.id;
  n.type = b->value()[inputs.begin()->id].type;
  return b->make(n, name);
}

}  // namespace shardgraph
