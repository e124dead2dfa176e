#pragma once
// The shape rule of a custom node (ir/custom_op.hpp): the op's input count and its sharding rule's
// ranks are checked first, then the op's own output_shape runs; a rejection becomes the graph's
// diagnostic, e.g.
//   shardgraph: scaled_tanh 'h.act': expects three dimensions: input 0 (batch, model). reshape x first
// The output's dtype is the first input's.
#include "shardgraph/ir/custom_op.hpp"
#include "shardgraph/ir/graph.hpp"
#include "shardgraph/ir/shape_text.hpp"

namespace shardgraph {

namespace detail {
// "<why>: input 0 <shape>, input 1 <shape>. <how>" for node i; returns false.
constexpr bool custom_mismatch(graph_ref g, int i, std::string_view why, std::string_view how) {
  if (diagnostic* d = g.report(i)) {
    const node& n = g[i];
    *d << why << ":";
    for (int k = 0; k < n.input_count; ++k) *d << (k ? ", " : " ") << "input " << k << " " << g[n.inputs[k]].shape;
    *d << ". " << how;
  }
  return false;
}
}  // namespace detail

constexpr bool infer_custom_shape(graph_ref g, int i, shape& out, dtype& type) {
  const node& n = g[i];
  const custom_op& c = *n.custom;
  if (n.input_count != c.input_count) {
    if (diagnostic* d = g.report(i))
      *d << "takes " << c.input_count << " inputs but was given " << n.input_count << ". pass "
         << c.input_count << " tensors to apply<" << c.name << ">";
    return false;
  }
  shape inputs[max_inputs]{};
  for (int k = 0; k < n.input_count; ++k) {
    inputs[k] = g[n.inputs[k]].shape;
    if (inputs[k].rank() != c.rule.inputs[k].rank) {
      if (diagnostic* d = g.report(i))
        *d << "input " << k << " " << inputs[k] << " has " << inputs[k].rank() << " dimensions but the sharding rule names "
           << c.rule.inputs[k].rank << ". give the input the rule's dimensions, or change " << c.name << "::sharding";
      return false;
    }
  }
  const shape_result r = c.output_shape(std::span<const shape>(inputs, static_cast<std::size_t>(n.input_count)));
  if (!r.ok()) return detail::custom_mismatch(g, i, r.why, r.how);
  if (r.value.rank() != c.rule.output.rank) {
    if (diagnostic* d = g.report(i))
      *d << "the output " << r.value << " has " << r.value.rank() << " dimensions but the sharding rule names "
         << c.rule.output.rank << ". make " << c.name << "::output_shape and " << c.name << "::sharding agree";
    return false;
  }
  out = r.value;
  type = n.input_count > 0 ? g[n.inputs[0]].type : n.type;
  return true;
}

}  // namespace shardgraph
