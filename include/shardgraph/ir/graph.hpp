#pragma once
// The graph: nodes in topological order, the mesh's axis names, and the first error found.
#include <cstddef>
#include <string_view>

#include "shardgraph/core/static_vector.hpp"
#include "shardgraph/ir/custom_op.hpp"
#include "shardgraph/ir/diagnostic.hpp"
#include "shardgraph/ir/node.hpp"
#include "shardgraph/mesh/mesh.hpp"

namespace shardgraph {

// The capacity of a graph in nodes: forward, backward and the collectives the passes insert,
// with each repeat() block counted once. The program sets it: a model that needs more defines
// SHARDGRAPH_MAX_NODES, alike for every translation unit of the program, before the first include
// (e.g. target_compile_definitions(app PRIVATE SHARDGRAPH_MAX_NODES=640)). The graph, the program's
// steps and the passes' scratch arrays are sized from it, and compile time grows with it.
#ifndef SHARDGRAPH_MAX_NODES
#define SHARDGRAPH_MAX_NODES 320
#endif
inline constexpr std::size_t max_nodes = SHARDGRAPH_MAX_NODES;

struct graph {
  mesh_axes axes;
  static_vector<node, max_nodes> nodes;
  diagnostic error;  // empty while the graph is valid

  constexpr bool ok() const { return error.empty(); }
  constexpr int size() const { return static_cast<int>(nodes.size()); }
  constexpr node& operator[](int i) { return nodes[static_cast<std::size_t>(i)]; }
  constexpr const node& operator[](int i) const { return nodes[static_cast<std::size_t>(i)]; }
  // Appends n and returns its index. A full graph records the error instead and returns the
  // last node's index, so that callers stay in bounds until the error is reported.
  constexpr int add(const node& n) {
    if (nodes.size() == max_nodes) {
      if (ok())
        error << "shardgraph: graph: more than " << static_cast<int>(max_nodes) << " nodes (at '"
              << n.name.view() << "'). define SHARDGRAPH_MAX_NODES to a larger capacity for every "
              << "translation unit of the program (e.g. -DSHARDGRAPH_MAX_NODES=640), or build repeated "
              << "layers once with repeat()";
      return size() - 1;
    }
    nodes.push_back(n);
    return size() - 1;
  }

  // Starts the error message about node i: "shardgraph: <op> '<name>': ". The caller appends
  // "<why>. <how to fix>". Only the first error is kept.
  constexpr diagnostic* report(int i) {
    if (!ok()) return nullptr;
    const node& n = (*this)[i];
    error << "shardgraph: " << op_name(n) << " '" << n.name.view() << "': ";
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
