#pragma once
// plan_rope_frequencies: the table of every rope and rope_grad step (compute/rope_frequencies.hpp),
// computed once at bind from the node's rope_scaling and its input's local (batch, heads, seq,
// head_dim); the kernel calls point at them. Ropes with the same scaling and sizes (q and k of
// every layer, and their gradients) share one table. The rope's sequence is whole on every rank
// (propagate_sharding keeps dims 2 and 3 unsharded), so the local seq is the sequence length that
// dynamic scaling grows theta with.
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/compute/rope_frequencies.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph {

struct rope_plan {
  std::vector<int> table_of;  // node -> index into tables, -1 for other nodes
  std::vector<compute::rope_frequencies> tables;

  const compute::rope_frequencies* of(int node) const {
    const int t = table_of[static_cast<std::size_t>(node)];
    return t < 0 ? nullptr : &tables[static_cast<std::size_t>(t)];
  }
};

// Throws, naming the node, for a head_dim or scaling that gives no table (before any kernel runs).
inline rope_plan plan_rope_frequencies(const program_view& p, const local_layout& layout) {
  const graph_view& g = p.nodes;
  rope_plan plan;
  plan.table_of.assign(static_cast<std::size_t>(g.size()), -1);
  std::vector<rope_scaling> scaling_of;  // of each table
  std::vector<std::int64_t> head_dim_of, seq_of;
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::rope && g[i].kind != op::rope_grad) continue;
    const std::vector<std::int64_t>& x = layout.of(g[i].inputs[0]).local;  // (batch, heads, seq, head_dim)
    const rope_scaling& s = g[i].rope;
    std::size_t t = 0;
    while (t < plan.tables.size() && !(scaling_of[t] == s && head_dim_of[t] == x[3] && seq_of[t] == x[2])) ++t;
    if (t == plan.tables.size()) {
      const std::string where = std::string(op_name(g[i].kind)) + " '" + std::string(g[i].name.view()) + "'";
      plan.tables.push_back(compute::make_rope_frequencies(s, x[3], x[2], where));
      scaling_of.push_back(s);
      head_dim_of.push_back(x[3]);
      seq_of.push_back(x[2]);
    }
    plan.table_of[static_cast<std::size_t>(i)] = static_cast<int>(t);
  }
  return plan;
}

}  // namespace shardgraph
