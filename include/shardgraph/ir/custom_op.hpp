#pragma once
// custom_op: the type-erased descriptor of an op the user defines outside the library (a struct
// with a name, an input count, a shape rule, a sharding rule, an optional backward and per-backend
// kernels; dsl/custom.hpp makes one per type as `custom_op_of<Op>`). A node of kind op::custom
// points at its descriptor; the descriptor is a static constexpr object and its functions are
// constexpr, so graphs holding custom nodes stay constexpr values.
#include <span>
#include <string_view>

#include "shardgraph/core/shape.hpp"
#include "shardgraph/ir/node.hpp"
#include "shardgraph/ir/sharding_rule.hpp"

namespace shardgraph {

struct custom_call;       // compute/custom_call.hpp: what a kernel receives
class custom_gradient;    // ir/custom_gradient.hpp: what a backward receives

// A shape rule's answer: the output's shape, or why the inputs do not fit and how to fix it
// (the graph's diagnostic then names the op, the node and every input's shape).
struct shape_result {
  shardgraph::shape value{};
  std::string_view why{};
  std::string_view how{};

  constexpr shape_result(shardgraph::shape s) : value(s) {}  // NOLINT: a shape rule returns a shape
  constexpr shape_result(std::string_view why_text, std::string_view how_text) : why(why_text), how(how_text) {}
  constexpr bool ok() const { return why.empty(); }
};
// A shape rule's rejection: `return shape_error("expects a matrix", "reshape x first");`
constexpr shape_result shape_error(std::string_view why, std::string_view how) { return {why, how}; }

using custom_kernel_function = void (*)(const custom_call&);
// One kernel of a custom op: the backend it runs on (a backend's traits::name: "cpu", "cuda") and
// the function.
struct custom_kernel {
  std::string_view backend;
  custom_kernel_function run = nullptr;
};

struct custom_op {
  std::string_view name;
  int input_count = 1;
  sharding_rule rule{};
  shape_result (*output_shape)(std::span<const shape>) = nullptr;
  void (*backward)(custom_gradient&) = nullptr;  // null: forward only
  std::span<const custom_kernel> kernels{};

  // The kernel for backend `backend`; null when the op has none.
  constexpr custom_kernel_function kernel_for(std::string_view backend) const {
    for (const custom_kernel& k : kernels)
      if (k.backend == backend) return k.run;
    return nullptr;
  }
};

// The op's name as printers and messages show it: a custom node's own op name.
constexpr std::string_view op_name(const node& n) {
  return n.kind == op::custom && n.custom != nullptr ? n.custom->name : op_name(n.kind);
}

}  // namespace shardgraph
