#pragma once
// fuse: merges chains of elementwise ops (add, mul, add_bias, gelu, silu) into one kernel step.
// A node joins the group of the node just before it when that node is elementwise, in the same
// repeat region, feeds it, and has no other reader: then the intermediate never needs memory
// and the chain is one pass over the data. Marks `group` with the index of the group's first
// node, on groups of two or more nodes.
#include "shardgraph/ir/graph.hpp"

namespace shardgraph::passes {

template <std::size_t Capacity>
constexpr basic_graph<Capacity> fuse(const basic_graph<Capacity>& in) {
  basic_graph<Capacity> g = in;
  if (!g.ok()) return g;
  int readers[Capacity]{};
  for (const node& n : g.nodes)
    for (int k = 0; k < n.input_count; ++k) ++readers[n.inputs[k]];
  for (int i = 1; i < g.size(); ++i) {
    node& n = g[i];
    const node& prev = g[i - 1];
    if (!is_elementwise(n.kind) || !is_elementwise(prev.kind) || prev.region != n.region) continue;
    if (readers[i - 1] != 1) continue;
    bool feeds = false;
    for (int k = 0; k < n.input_count; ++k) feeds = feeds || n.inputs[k] == i - 1;
    if (!feeds) continue;
    if (prev.group < 0) g[i - 1].group = i - 1;
    n.group = g[i - 1].group;
  }
  return g;
}

}  // namespace shardgraph::passes
