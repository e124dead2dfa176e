#pragma once
// verify: structural checks of a graph before any other pass. Inputs come before their users,
// shapes and dtypes follow ir/shape_rules.hpp, shard annotations name dimensions that exist,
// repeat blocks are well formed, and every graph ends in at least one output.
#include "shardgraph/ir/graph.hpp"
#include "shardgraph/ir/shape_rules.hpp"

namespace shardgraph::passes {

template <std::size_t Capacity>
constexpr basic_graph<Capacity> verify(const basic_graph<Capacity>& in) {
  basic_graph<Capacity> g = in;
  if (!g.ok()) return g;
  int outputs = 0;
  int open_region = -1;
  for (int i = 0; i < g.size() && g.ok(); ++i) {
    node& n = g[i];
    for (int k = 0; k < n.input_count; ++k) {
      if (n.inputs[k] < 0 || n.inputs[k] >= i) {
        if (diagnostic* d = g.report(i)) *d << "input " << k << " is not an earlier node. build graphs with the DSL";
        return g;
      }
      const node& src = g[n.inputs[k]];
      if (src.body() >= 0 && src.body() != n.region) {
        if (diagnostic* d = g.report(i))
          *d << "reads '" << src.name.view() << "' from inside a repeat block it is not part of. "
             << "return the value from the block instead";
        return g;
      }
    }
    if (n.kind == op::repeat_begin) {
      if (open_region >= 0) {
        if (diagnostic* d = g.report(i)) *d << "repeat blocks are nested. flatten them into one block";
        return g;
      }
      open_region = i;
    }
    if (n.kind == op::repeat_end) {
      if (n.region != open_region) {
        if (diagnostic* d = g.report(i)) *d << "ends a repeat block that is not open. build blocks with repeat()";
        return g;
      }
      open_region = -1;
    }
    shape s;
    dtype t = n.type;
    if (!infer_shape(g, i, s, t)) return g;
    if (!(s == n.shape) || t != n.type) {
      if (diagnostic* d = g.report(i)) *d << "stored shape or dtype disagrees with the op's rule. rebuild the graph with the DSL";
      return g;
    }
    for (int a = 0; a < g.axes.size(); ++a)
      if (n.spec[a].is_shard() && (n.spec[a].dim < 0 || n.spec[a].dim >= n.shape.rank()))
        if (diagnostic* d = g.report(i))
          *d << "is sharded on dimension " << int{n.spec[a].dim} << " of a " << n.shape.rank()
             << "-dimensional tensor. shard an existing dimension";
    if (n.kind == op::output) ++outputs;
  }
  if (g.ok() && open_region >= 0)
    if (diagnostic* d = g.report(open_region)) *d << "repeat block is never closed. build blocks with repeat()";
  if (g.ok() && outputs == 0 && g.size() > 0)
    if (diagnostic* d = g.report(g.size() - 1)) *d << "the graph has no output. mark results with output(x, name)";
  return g;
}

}  // namespace shardgraph::passes
