#pragma once
// Prints a program as a Graphviz digraph (`dot -Tsvg`): compute steps as boxes, collectives as
// orange ellipses labelled with their mesh axis, fused chains as one box, the repeat block as a
// cluster. Parameters and inputs are small grey notes.
#include <ostream>
#include <string>

#include "shardgraph/program/print_text.hpp"

namespace shardgraph {

inline void print_graphviz(std::ostream& out, const program_view& p) {
  const graph_view& g = p.nodes;
  // A fused chain is drawn as its last node; edges into any member point there.
  auto shown = [&](int i) {
    const node& n = g[i];
    if (n.group < 0) return i;
    int last = i;
    while (last + 1 < g.size() && g[last + 1].group == n.group) ++last;
    return last;
  };
  out << "digraph program {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  bool in_cluster = false;
  for (int i = 0; i < g.size(); ++i) {
    const node& n = g[i];
    if (n.kind == op::repeat_begin) {
      out << "  subgraph cluster_" << i << " {\n    label=\"repeat " << n.name.view() << " x layers\";\n";
      in_cluster = true;
    }
    if (shown(i) != i) continue;
    std::string label(op_name(n));
    if (n.group >= 0) {
      label.clear();
      for (int j = n.group; j <= i; ++j) label += (label.empty() ? "" : "+") + std::string(op_name(g[j].kind));
    }
    label += "\\n" + std::string(n.name.view()) + "\\n" + placement_text(g, n.spec);
    std::string style = "shape=box";
    if (is_collective(n.kind)) {
      label = std::string(op_name(n.kind)) + " @" + std::string(g.axes.name(n.axis)) + "\\n" + std::string(n.name.view());
      style = "shape=ellipse, style=filled, fillcolor=orange";
    } else if (is_leaf(n.kind)) {
      style = "shape=note, style=filled, fillcolor=grey90";
    } else if (n.kind == op::local_slice) {
      style = "shape=ellipse, style=dashed";
    }
    out << "  n" << i << " [label=\"" << label << "\", " << style << "];\n";
    if (n.kind == op::repeat_end && in_cluster) {
      out << "  }\n";
      in_cluster = false;
    }
  }
  if (in_cluster) out << "  }\n";
  for (int i = 0; i < g.size(); ++i) {
    const node& n = g[i];
    for (int k = 0; k < n.input_count; ++k)
      if (shown(n.inputs[k]) != shown(i)) out << "  n" << shown(n.inputs[k]) << " -> n" << shown(i) << ";\n";
  }
  out << "}\n";
}

}  // namespace shardgraph
