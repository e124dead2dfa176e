#pragma once
// The per-rank program: the lowered graph plus the list of steps every rank runs, in order.
// All ranks run the same steps (SPMD); what differs per rank is data: local slices and the
// groups its collectives talk to. A step is one kernel, one fused elementwise chain, one
// redistribution, or a loop marker of a repeat block.
#include <cstdint>
#include <span>
#include <string_view>

#include "shardgraph/ir/graph.hpp"

namespace shardgraph {

enum class step_kind : std::uint8_t {
  compute,      // one op, one kernel
  fused,        // an elementwise chain, nodes [first, node], one kernel
  communicate,  // all_reduce, all_gather, reduce_scatter, all_to_all on one mesh axis
  slice,        // local_slice: keep this rank's block, no traffic
  loop_begin,   // repeat_begin: start of the block, run `layers` times
  loop_end,     // repeat_end: jump back to loop_begin until every layer ran
  output,       // a value returned to the caller
  copy,         // redistribute: its collectives ran before it; the value is its input's
};

constexpr std::string_view step_kind_name(step_kind k) {
  switch (k) {
    case step_kind::compute:
      return "compute";
    case step_kind::fused:
      return "fused";
    case step_kind::communicate:
      return "communicate";
    case step_kind::slice:
      return "slice";
    case step_kind::loop_begin:
      return "loop_begin";
    case step_kind::loop_end:
      return "loop_end";
    case step_kind::output:
      return "output";
    case step_kind::copy:
      return "copy";
  }
  return "?";
}

// Activation recomputation in training programs: keep every forward block value per layer (none),
// keep only each layer's input and run the block's forward again during backward (full), or
// keep everything but the attention outputs (attention, the selective kind).
enum class recompute : std::uint8_t { none, full, attention };

struct step {
  step_kind kind = step_kind::compute;
  int node = -1;   // the node whose value this step produces
  int first = -1;  // fused: the group's first node
};

// The steps' and the scalars' part of a program, alike for every capacity.
struct program_options {
  int zero_stage = 0;  // training programs: the ZeRO stage they were compiled for
  int zero_axis = -1;  // and the mesh axis it shards over
  shardgraph::recompute recompute = shardgraph::recompute::none;
  std::int64_t bucket_bytes = std::int64_t{25} << 20;  // gradient all-reduce buckets (training{})
  bool overlap_communication = true;  // buckets and ZeRO-3 gathers on communication threads (training{})
  int pipeline_axis = -1;  // the mesh axis the layer stack is split over (-1: none)
};

namespace detail {
// What a program answers, over D's `nodes` (a graph or a graph_view) and `steps`.
template <class D>
struct program_reading {
  // Nodes of kind `o` (collectives: on mesh axis `axis`, or on any axis when empty).
  constexpr int count(op o, std::string_view axis = {}) const { return self().nodes.count(o, axis); }
  constexpr int count(step_kind k) const {
    int c = 0;
    for (const step& s : self().steps) c += s.kind == k ? 1 : 0;
    return c;
  }
  constexpr const node& node_of(const step& s) const { return self().nodes[s.node]; }
  // A training program holds the backward pass: one param_grad per parameter that gets a gradient.
  constexpr bool is_training() const { return count(op::param_grad) > 0; }

 private:
  constexpr const D& self() const { return static_cast<const D&>(*this); }
};
}  // namespace detail

// A compiled program: its graph and steps, of the capacity the graph was built with.
template <std::size_t Capacity = default_graph_capacity>
struct basic_program : program_options, detail::program_reading<basic_program<Capacity>> {
  basic_graph<Capacity> nodes;
  static_vector<step, Capacity> steps;

  constexpr bool ok() const { return nodes.ok(); }
  constexpr std::string_view error() const { return nodes.error.view(); }
};

// The program of a graph of the default capacity.
using program = basic_program<>;

// A program of any capacity, read only: what bind and the run time take. Valid while the program
// lives.
struct program_view : program_options, detail::program_reading<program_view> {
  graph_view nodes;
  std::span<const step> steps;

  template <std::size_t Capacity>
  constexpr program_view(const basic_program<Capacity>& p)  // NOLINT(google-explicit-constructor): a view
      : program_options(p), nodes(p.nodes), steps(p.steps.items, p.steps.size()) {}
  constexpr program_view(const program_options& o, graph_view n, std::span<const step> s)
      : program_options(o), nodes(n), steps(s) {}

  constexpr bool ok() const { return nodes.ok(); }
  constexpr std::string_view error() const { return nodes.error(); }
};

// Orders the graph's nodes into steps. Leaves (inputs, parameters) are bound, not run.
template <std::size_t Capacity>
constexpr basic_program<Capacity> lower(const basic_graph<Capacity>& g) {
  basic_program<Capacity> p;
  p.nodes = g;
  if (!g.ok()) return p;
  for (int i = 0; i < g.size(); ++i) {
    const node& n = g[i];
    if (is_leaf(n.kind)) continue;
    if (n.group >= 0) {
      bool ends_group = i + 1 >= g.size() || g[i + 1].group != n.group;
      if (ends_group) p.steps.push_back({step_kind::fused, i, n.group});
      continue;
    }
    step_kind k = step_kind::compute;
    if (is_collective(n.kind))
      k = step_kind::communicate;
    else if (n.kind == op::local_slice)
      k = step_kind::slice;
    else if (n.kind == op::repeat_begin)
      k = step_kind::loop_begin;
    else if (n.kind == op::repeat_end)
      k = step_kind::loop_end;
    else if (n.kind == op::output)
      k = step_kind::output;
    else if (n.kind == op::redistribute || n.kind == op::param_grad)
      k = step_kind::copy;
    p.steps.push_back({k, i, i});
  }
  return p;
}

}  // namespace shardgraph
