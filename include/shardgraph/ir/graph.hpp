#pragma once
// The graph: nodes in topological order, the mesh's axis names, and the first error found.
//
// basic_graph<Capacity> holds the nodes; its capacity is a template argument the program chooses
// (the builder's: `builder<Mesh, 640>`), and the passes keep it. Code that reads or edits a graph
// without caring for its capacity takes a graph_view (reads) or a graph_ref (reads, edits, appends).
#include <cstddef>
#include <span>
#include <string_view>

#include "shardgraph/core/static_vector.hpp"
#include "shardgraph/core/vector_ref.hpp"
#include "shardgraph/ir/custom_op.hpp"
#include "shardgraph/ir/diagnostic.hpp"
#include "shardgraph/ir/node.hpp"
#include "shardgraph/mesh/mesh.hpp"

namespace shardgraph {

// The capacity of a graph in nodes when the program names none: forward, backward and the
// collectives the passes insert, with each repeat() block counted once. Compile time grows with
// the capacity, so a model past it raises its own (builder<Mesh, Capacity>).
inline constexpr std::size_t default_graph_capacity = 320;

namespace detail {
// What every graph type answers, over D's `nodes` (size(), [], iteration) and `axes`.
template <class D>
struct graph_reading {
  constexpr int size() const { return static_cast<int>(self().nodes.size()); }
  constexpr const node& operator[](int i) const { return self().nodes[static_cast<std::size_t>(i)]; }
  // Number of nodes of kind `o`; for collectives, only those on mesh axis `axis` (empty: any).
  constexpr int count(op o, std::string_view axis = {}) const {
    int c = 0;
    int a = axis.empty() ? -1 : self().axes.index_of(axis);
    for (const node& n : self().nodes)
      if (n.kind == o && (axis.empty() || n.axis == a)) ++c;
    return c;
  }
  constexpr int find(std::string_view name) const {
    for (int i = 0; i < size(); ++i)
      if ((*this)[i].name.view() == name) return i;
    return -1;
  }

 private:
  constexpr const D& self() const { return static_cast<const D&>(*this); }
};

// What a graph that can change adds: D also has `error` (a diagnostic) and nodes.capacity().
template <class D>
struct graph_writing : graph_reading<D> {
  using graph_reading<D>::operator[];
  constexpr bool ok() const { return self().error.empty(); }
  constexpr node& operator[](int i) { return self().nodes[static_cast<std::size_t>(i)]; }

  // Appends n and returns its index. A full graph records the error instead and returns the
  // last node's index, so that callers stay in bounds until the error is reported.
  constexpr int add(const node& n) {
    D& g = self();
    if (g.nodes.size() == g.nodes.capacity()) {
      if (ok())
        g.error << "shardgraph: graph: more than " << static_cast<int>(g.nodes.capacity()) << " nodes (at '"
                << n.name.view() << "'). raise the graph's capacity, the builder's second template "
                << "argument (builder<Mesh, " << static_cast<int>(2 * g.nodes.capacity())
                << ">), or build repeated layers once with repeat()";
      return this->size() - 1;
    }
    g.nodes.push_back(n);
    return this->size() - 1;
  }

  // Starts the error message about node i: "shardgraph: <op> '<name>': ". The caller appends
  // "<why>. <how to fix>". Only the first error is kept.
  constexpr diagnostic* report(int i) {
    if (!ok()) return nullptr;
    D& g = self();
    const node& n = g[i];
    g.error << "shardgraph: " << op_name(n) << " '" << n.name.view() << "': ";
    return &g.error;
  }

 private:
  constexpr D& self() { return static_cast<D&>(*this); }
  constexpr const D& self() const { return static_cast<const D&>(*this); }
};
}  // namespace detail

template <std::size_t Capacity = default_graph_capacity>
struct basic_graph : detail::graph_writing<basic_graph<Capacity>> {
  static constexpr std::size_t capacity = Capacity;
  mesh_axes axes;
  static_vector<node, Capacity> nodes;
  diagnostic error;  // empty while the graph is valid
};

// The graph of the default capacity: what a program that never raises it builds.
using graph = basic_graph<>;

// A graph of any capacity, by reference: its nodes can change and grow. Valid while it lives.
struct graph_ref : detail::graph_writing<graph_ref> {
  mesh_axes& axes;
  vector_ref<node> nodes;
  diagnostic& error;

  template <std::size_t Capacity>
  constexpr graph_ref(basic_graph<Capacity>& g)  // NOLINT(google-explicit-constructor): a view
      : axes(g.axes), nodes(g.nodes), error(g.error) {}
};

// A graph of any capacity, read only. Holds a copy of the axes and points at the nodes; valid
// while the graph lives.
struct graph_view : detail::graph_reading<graph_view> {
  mesh_axes axes;
  std::span<const node> nodes;

  template <std::size_t Capacity>
  constexpr graph_view(const basic_graph<Capacity>& g)  // NOLINT(google-explicit-constructor): a view
      : axes(g.axes), nodes(g.nodes.items, g.nodes.size()), error_(&g.error) {}
  constexpr graph_view(const graph_ref& g)  // NOLINT(google-explicit-constructor): a view
      : axes(g.axes), nodes(g.nodes.begin(), g.nodes.size()), error_(&g.error) {}
  // Nodes kept elsewhere (the run time's copy of a program).
  constexpr graph_view(const mesh_axes& a, std::span<const node> n, const diagnostic& error)
      : axes(a), nodes(n), error_(&error) {}

  constexpr bool ok() const { return error_->empty(); }
  constexpr std::string_view error() const { return error_->view(); }

 private:
  const diagnostic* error_;
};

}  // namespace shardgraph
