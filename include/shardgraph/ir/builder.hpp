#pragma once
// graph_builder: records DSL calls into a graph value. Runs in constant evaluation; every
// mistake becomes the graph's diagnostic (reported by compile()) rather than a throw, so the
// message can name the node.
#include <string_view>

#include "shardgraph/ir/graph.hpp"
#include "shardgraph/ir/shape_rules.hpp"

namespace shardgraph {

class graph_builder;

// A handle to a node under construction. Cheap to copy; valid while its builder lives.
struct tensor {
  graph_builder* builder = nullptr;
  int id = -1;
};

// What the DSL's functions see of a builder: it records into a graph of any capacity, which a
// basic_graph_builder<Capacity> (or builder<Mesh, Capacity>) holds. Not copyable: tensors point at it.
class graph_builder {
 public:
  graph_builder(const graph_builder&) = delete;
  graph_builder& operator=(const graph_builder&) = delete;

  constexpr dtype float_type() const { return float_type_; }
  constexpr graph_view value() const { return graph_; }
  constexpr graph_ref value() { return graph_; }

  // A value fed by the user at run time, e.g. token ids (batch, seq) i64 sharded on dp.
  template <class... Annotations>
  constexpr tensor input(std::string_view name, shape s, dtype t, const Annotations&... annotations) {
    node n;
    n.kind = op::input;
    n.name.assign(name);
    n.shape = s;
    n.type = t;
    return leaf(n, annotations...);
  }

  // A weight. Inside repeat(), its name gets the block's prefix and it exists once per layer.
  template <class... Annotations>
  constexpr tensor param(std::string_view name, shape s, const Annotations&... annotations) {
    node n;
    n.kind = op::parameter;
    if (region_ >= 0) {
      n.name.assign(graph_[region_].name.view());
      n.name.append(".");
      n.name.append(name);
    } else {
      n.name.assign(name);
    }
    n.shape = s;
    n.type = float_type_;
    return leaf(n, annotations...);
  }

  // Adds an op node whose inputs are set; names it "<scope>.<op>" unless named, infers its shape.
  constexpr tensor make(node n, std::string_view name = {}) {
    if (name.empty()) {
      n.name.assign(scope_.view());
      if (!scope_.empty()) n.name.append(".");
      n.name.append(op_name(n));
    } else {
      n.name.assign(name);
    }
    if (n.region < 0) n.region = region_;
    int i = graph_.add(n);
    shape s;
    dtype t = n.type;
    // After the first error, later nodes keep no shape: their rules would read the failed
    // node's missing shape and bury the message under errors of their own.
    if (graph_.ok() && infer_shape(graph_, i, s, t)) {
      graph_[i].shape = s;
      graph_[i].type = t;
    }
    return {this, i};
  }

  constexpr void push_scope(std::string_view name) {
    scope_lengths_.push_back(scope_.size());
    if (!scope_.empty()) scope_.append(".");
    scope_.append(name);
  }
  constexpr void pop_scope() {
    name_buffer previous;
    previous.assign(scope_.view().substr(0, scope_lengths_.back()));
    scope_ = previous;
    scope_lengths_.pop_back();
  }

  constexpr int region() const { return region_; }
  constexpr void set_region(int begin) { region_ = begin; }

 protected:
  constexpr graph_builder(graph_ref storage, dtype float_type) : graph_(storage), float_type_(float_type) {}

 private:
  template <class... Annotations>
  constexpr tensor leaf(node n, const Annotations&... annotations) {
    n.annotated = true;
    int i = graph_.add(n);
    graph_[i].region = region_;
    (apply(i, annotations), ...);
    return {this, i};
  }

  // Resolves one `on<"axis">(placement)` against the mesh.
  constexpr void apply(int i, const axis_placement& a) {
    node& n = graph_[i];
    int axis = graph_.axes.index_of(a.axis.view());
    if (axis < 0) {
      if (diagnostic* d = graph_.report(i)) {
        *d << "axis '" << a.axis.view() << "' is not in the mesh (";
        for (int k = 0; k < graph_.axes.size(); ++k) *d << (k ? ", " : "") << graph_.axes.name(k);
        *d << "). annotate with one of the mesh's axes, or add the axis to the mesh";
      }
      return;
    }
    placement p = a.where;
    if (p.is_shard()) {
      int d = p.dim < 0 ? p.dim + n.shape.rank() : p.dim;
      if (d < 0 || d >= n.shape.rank()) {
        if (diagnostic* diag = graph_.report(i))
          *diag << "shard<" << int{p.dim} << "> on axis '" << a.axis.view() << "' but the tensor has "
                << n.shape.rank() << " dimensions. shard a dimension in [0, " << n.shape.rank() << ")";
        return;
      }
      p.dim = static_cast<std::int8_t>(d);
      for (int other = 0; other < graph_.axes.size(); ++other)
        if (other != axis && n.spec[other].is_shard(d))
          if (diagnostic* diag = graph_.report(i))
            *diag << "dimension " << d << " is sharded on both '" << graph_.axes.name(other) << "' and '"
                  << a.axis.view() << "'. shard each dimension on one mesh axis";
    }
    if (p.is_partial() && n.kind != op::input) {
      if (diagnostic* diag = graph_.report(i))
        *diag << "a parameter cannot be Partial on '" << a.axis.view() << "'. annotate it Replicate or Shard<d>";
      return;
    }
    n.spec[axis] = p;
  }

  graph_ref graph_;
  dtype float_type_;
  name_buffer scope_;
  static_vector<std::size_t, 8> scope_lengths_;
  int region_ = -1;
};

namespace detail {
// The graph a builder records into, a base so that it exists before graph_builder points at it.
template <std::size_t Capacity>
struct recorded_graph {
  basic_graph<Capacity> recorded;
};
}  // namespace detail

// A builder holding a graph of Capacity nodes (forward, backward and collectives together).
template <std::size_t Capacity = default_graph_capacity>
class basic_graph_builder : private detail::recorded_graph<Capacity>, public graph_builder {
 public:
  // The graph base is default-initialized (empty) before graph_builder; it is not named among the
  // initializers, whose order nvcc's front end gets wrong for a dependent base.
  constexpr explicit basic_graph_builder(const mesh_axes& axes, dtype float_type = dtype::f32)
      : graph_builder(this->recorded, float_type) {
    this->recorded.axes = axes;
  }
  // Continues `existing`: autodiff adds a custom op's backward (DSL ops) to the graph it differentiates.
  constexpr explicit basic_graph_builder(const basic_graph<Capacity>& existing, dtype float_type = dtype::f32)
      : graph_builder(this->recorded, float_type) {
    this->recorded = existing;
  }

  constexpr basic_graph<Capacity> finish() const { return this->recorded; }
};

// The builder users receive, with the mesh's axis names taken from the Mesh type. Capacity: the
// nodes the graph holds, forward, backward and collectives together (a repeat block once);
// compile time grows with it. Past it, the graph's error names it and how to raise it.
template <class Mesh, std::size_t Capacity = default_graph_capacity>
class builder : public basic_graph_builder<Capacity> {
 public:
  using mesh_type = Mesh;
  static constexpr std::size_t capacity = Capacity;
  constexpr explicit builder(dtype float_type = dtype::f32)
      : basic_graph_builder<Capacity>(Mesh::axes(), float_type) {}
};

}  // namespace shardgraph
