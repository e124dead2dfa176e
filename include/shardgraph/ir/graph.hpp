#pragma once
// The graph: nodes in topological order, the mesh's axis names, and the first error found.
#include <cstddef>
#include <string_view>

#include "shardgraph/core/static_vector.hpp"
#include "shardgraph/ir/diagnostic.hpp"
#include "shardgraph/ir/node.hpp"
#include "shardgraph/mesh/mesh.hpp"

namespace shardgraph {

inline constexpr std::size_t max_nodes = 320;

struct graph {
  mesh_axes axes;
  static_vector<node, max_nodes> nodes;
  diagnostic error;  // empty while the graph is valid

  constexpr bool ok() const { return error.empty(); }
  constexpr int size() const { return static_cast<int>(nodes.size()); }
  constexpr node& operator[](int i) { return nodes[static_cast<std::size_t>(i)]; }
  constexpr const node& operator[](int i) const { return nodes[static_cast<std::size_t>(i)]; }
  constexpr int add(const node& n) {
    nodes.push_back(n);
    return size() - 1;
  }

  // Starts the error message about node i: "shardgraph: <op> '<name>': ". The caller appends
  // "<why>. <how to fix>". Only the first error is kept.
  constexpr diagnostic* report(int i) {
    if (!ok()) return nullptr;
    const node& n = (*this)[i];
    error << "shardgraph: " << op_name(n.kind) << " '" << n.name.view() << "': ";
    return &error;
  }

  // Number of nodes of kind `o`; for collectives, only those on mesh axis `axis` (empty: any).
  constexpr int count(op o, std::string_view axis = {}) const {
    int c = 0;
    int a = axis.empty() ? -1 : axes.index_of(axis);
    for (const node& n : nodes)
      if (n.kind == o && (axis.empty() || n.axis == a)) ++c;
    return c;
  }
  constexpr int find(std::string_view name) const {
    for (int i = 0; i < size(); ++i)
      if ((*this)[i].name.view() == name) return i;
    return -1;
  }
};

}  // namespace shardgraph
