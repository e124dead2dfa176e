#pragma once
// custom_gradient: what a custom op's backward receives (ir/custom_op.hpp). Its tensors are nodes
// of the graph being differentiated; the backward adds ordinary DSL ops and other custom ops to it
// (autodiff names them "d.<forward node>.<op>") and sets each input's gradient:
//
//   static constexpr void backward(shardgraph::custom_gradient& g) {   // y = tanh(x * s)
//     auto y = g.output();
//     g.set_input_grad(0, shardgraph::apply<scaled_tanh_grad>({y, g.output_grad()}, g.attribute()));
//   }
//
// An input needs a gradient when it is floating point and not a graph input (needs_grad); the
// backward must set each of those, with the input's shape.
#include "shardgraph/ir/builder.hpp"

namespace shardgraph {

class custom_gradient {
 public:
  constexpr custom_gradient(graph_builder& b, int forward, int output_grad)
      : builder_(&b), forward_(forward), output_grad_(output_grad) {}

  constexpr int input_count() const { return node_().input_count; }
  constexpr tensor input(int k) const { return {builder_, node_().inputs[k]}; }
  constexpr tensor output() const { return {builder_, forward_}; }
  constexpr tensor output_grad() const { return {builder_, output_grad_}; }
  constexpr double attribute() const { return node_().scalar; }
  constexpr bool needs_grad(int k) const {
    const node& x = builder_->value()[node_().inputs[k]];
    return x.kind != op::input && is_floating(x.type);
  }
  constexpr void set_input_grad(int k, tensor gradient) { grads_[k] = gradient.id; }
  // The gradient set for input k (-1: none).
  constexpr int input_grad(int k) const { return grads_[k]; }

 private:
  constexpr const node& node_() const { return builder_->value()[forward_]; }

  graph_builder* builder_;
  int forward_;
  int output_grad_;
  int grads_[max_inputs]{-1, -1, -1, -1};
};

}  // namespace shardgraph
