#pragma once
// Prints a per-rank program as text: the parameters with their placements, then the steps in
// order, each collective with the tensor it moves and the op that needed it. With sizes and a
// mesh shape, shapes are this rank's local sizes; without, symbolic ("batch/dp").
//
//   step  kind         op                  value                  local shape    placement
//      5  communicate  all_reduce @tp      h.attn.c_proj          (2, 16, 32)    dp:S0 tp:R   <- add_bias 'h.attn.add_bias'
#include <cstdio>
#include <optional>
#include <ostream>
#include <string>

#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/mesh/mesh_shape.hpp"
#include "shardgraph/program/program.hpp"

namespace shardgraph {

struct print_options {
  std::optional<model_sizes> sizes;  // concrete local shapes when given
  mesh_shape mesh;                   // axis sizes (1 when not given)
};

inline std::string placement_text(const graph_view& g, const shard_spec& s) {
  std::string t;
  for (int a = 0; a < g.axes.size(); ++a) {
    if (!t.empty()) t += ' ';
    t += std::string(g.axes.name(a)) + ':';
    const placement& p = s[a];
    t += p.is_replicate() ? "R" : p.is_partial() ? "P" : "S" + std::to_string(int{p.dim});
  }
  return t;
}

// "(batch/dp, seq, model)" or, with sizes, "(2, 16, 32)".
inline std::string shape_text(const graph_view& g, const node& n, const print_options& o) {
  std::string t = "(";
  for (int k = 0; k < n.shape.rank(); ++k) {
    if (k) t += ", ";
    extent e = n.shape[k];
    int shards = 1;
    std::string split;
    for (int a = 0; a < g.axes.size(); ++a)
      if (n.spec[a].is_shard(k)) {
        shards *= o.mesh.size(g.axes.name(a));
        split += "/" + std::string(g.axes.name(a));
      }
    if (o.sizes) t += std::to_string(o.sizes->get(e) / shards);
    else t += extent_text(e) + split;
  }
  return t + ")";
}

inline std::string padded(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s + ' ';
}

inline void print_program(std::ostream& out, const program_view& p, const print_options& o = {}) {
  const graph_view& g = p.nodes;
  if (!p.ok()) {
    out << p.error() << '\n';
    return;
  }
  out << "parameters (placement per mesh axis: R replicate, S<d> shard dim d, P partial sum)\n";
  for (int i = 0; i < g.size(); ++i) {
    const node& n = g[i];
    if (n.kind != op::parameter) continue;
    std::string name(n.name.view());
    if (n.region >= 0) {
      std::string block(g[n.region].name.view());
      name = block + ".{layer}" + name.substr(block.size());
    }
    out << "  " << padded(name, 34) << padded(shape_text(g, n, o), 24) << placement_text(g, n.spec)
        << (n.kv_cache ? "   KV cache (state: written by cached_attention)" : "") << '\n';
  }
  out << "steps\n";
  out << "  " << padded("step", 4) << padded("kind", 11) << padded("op", 20) << padded("value", 24)
      << padded(o.sizes ? "local shape" : "shape", 26) << "placement\n";
  std::string indent;
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    const step& st = p.steps[s];
    const node& n = g[st.node];
    if (st.kind == step_kind::loop_end) indent.resize(indent.size() - 2);
    std::string what(op_name(n));
    if (st.kind == step_kind::fused) {
      what.clear();
      for (int j = st.first; j <= st.node; ++j) what += (what.empty() ? "" : "+") + std::string(op_name(g[j].kind));
    }
    if (is_redistribution(n.kind)) what += " @" + std::string(g.axes.name(n.axis));
    char number[24];  // any size_t: 20 digits
    std::snprintf(number, sizeof number, "%4zu", s);
    out << "  " << number << ' ' << padded(std::string(step_kind_name(st.kind)), 11) << indent
        << padded(what, 20 - std::min<std::size_t>(indent.size(), 20)) << padded(std::string(n.name.view()), 24)
        << padded(shape_text(g, n, o), 26) << placement_text(g, n.spec);
    if (n.kind == op::cached_attention)
      out << "   writes, reads '" << g[n.inputs[3]].name.view() << "' at '" << g[n.inputs[4]].name.view() << "'";
    if (is_redistribution(n.kind) && n.reason >= 0)
      out << "   <- " << op_name(g[n.reason]) << " '" << g[n.reason].name.view() << "'";
    if (st.kind == step_kind::loop_begin)
      out << "   x " << (o.sizes ? std::to_string(o.sizes->get(size_symbol::layers)) : std::string("layers"));
    out << '\n';
    if (st.kind == step_kind::loop_begin) indent += "  ";
  }
  out << "  " << p.count(step_kind::communicate) << " communication steps: " << p.count(op::all_reduce) << " all_reduce, "
      << p.count(op::all_gather) << " all_gather, " << p.count(op::reduce_scatter) << " reduce_scatter, "
      << p.count(op::all_to_all) << " all_to_all; " << p.count(op::local_slice) << " local slices\n";
}

}  // namespace shardgraph
