#pragma once
// insert_collectives: wherever a producer's placement differs from what its consumer needs
// (propagate_sharding recorded both), insert one redistribution per differing mesh axis:
//
//   from \ to   Replicate    Shard<d>                  Partial
//   Partial     all_reduce   reduce_scatter
//   Shard<d>    all_gather   all_to_all (to Shard<e>)
//   Replicate   -            local_slice (no traffic)
//
// Where several axes change, the order moves the fewest bytes: each collective's traffic grows
// with the local size of the value it moves, so the steps that shrink it (local_slice,
// reduce_scatter) come first, those that keep it (all_reduce, all_to_all) next and the all_gathers
// last. A value Shard<0> on dp and Partial on tp that is needed whole is all-reduced on tp while it
// holds 1/dp of the batch, then gathered on dp. An order whose intermediate placement would shard
// one dimension on two axes is passed over.
//
// A redistribution of one value to one placement is made once and reused by later consumers
// in the same repeat region (or in the backward block of that block). Each inserted node records
// the consumer that needed it (`reason`).
#include "shardgraph/ir/graph.hpp"

namespace shardgraph::passes {

namespace detail {

struct redistribution_cache_entry {
  int source = -1;
  shard_spec target;
  int region = -1;
  int result = -1;
};

// Appends the node that moves `source` from placement `from` to `to` on `axis`; returns its index.
constexpr int add_redistribution(graph_ref g, int source, int axis, placement from, placement to, int region) {
  node n;
  const node& src = g[source];
  n.name = src.name;
  n.shape = src.shape;
  n.type = src.type;
  n.spec = src.spec;
  n.spec[axis] = to;
  n.axis = axis;
  n.region = region;
  n.inputs[0] = source;
  n.input_count = 1;
  for (int a = 0; a < g.axes.size(); ++a) n.required[0][a] = src.spec[a];
  if (from.is_partial() && to.is_replicate()) {
    n.kind = op::all_reduce;
  } else if (from.is_partial() && to.is_shard()) {
    n.kind = op::reduce_scatter;
    n.to_dim = to.dim;
  } else if (from.is_shard() && to.is_replicate()) {
    n.kind = op::all_gather;
    n.from_dim = from.dim;
  } else if (from.is_shard() && to.is_shard()) {
    n.kind = op::all_to_all;
    n.from_dim = from.dim;
    n.to_dim = to.dim;
  } else if (from.is_replicate() && to.is_shard()) {
    n.kind = op::local_slice;
    n.to_dim = to.dim;
  } else {
    if (diagnostic* d = g.report(source))
      *d << "no redistribution turns its placement on '" << g.axes.name(axis)
         << "' into Partial. this is a bug in propagate_sharding; please report it";
    return source;
  }
  return g.add(n);
}

// How moving from `from` to `to` on one axis changes the local size: 0 shrinks it (local_slice,
// reduce_scatter), 1 keeps it (all_reduce, all_to_all), 2 grows it (all_gather).
constexpr int size_change(placement from, placement to) {
  if (to.is_shard() && !from.is_shard()) return 0;
  if (to.is_replicate() && from.is_shard()) return 2;
  return 1;
}

// Whether no tensor dimension of s is sharded on two of its first `axes` mesh axes.
constexpr bool one_axis_per_dimension(const shard_spec& s, int axes) {
  for (int a = 0; a < axes; ++a)
    for (int b = a + 1; b < axes; ++b)
      if (s[a].is_shard() && s[a] == s[b]) return false;
  return true;
}

// The next axis to redistribute on, from `have` towards `want`: the smallest size_change whose
// result keeps one axis per dimension, else the first axis that differs; -1 when none differs.
constexpr int next_axis(const shard_spec& have, const shard_spec& want, int axes) {
  int best = -1, best_change = 3, first = -1;
  for (int axis = 0; axis < axes; ++axis) {
    if (have[axis] == want[axis]) continue;
    if (first < 0) first = axis;
    shard_spec next = have;
    next[axis] = want[axis];
    const int change = size_change(have[axis], want[axis]);
    if (change < best_change && one_axis_per_dimension(next, axes)) {
      best = axis;
      best_change = change;
    }
  }
  return best >= 0 ? best : first;
}

// A redistribution made in region `made_in` serves a consumer in `used_in` when both are the same
// region, or when the consumer is in the backward block of that forward block: a training program
// keeps every forward block value per layer, so the backward block reads layer l's copy.
constexpr bool reusable(const graph_view& g, int made_in, int used_in) {
  if (made_in == used_in) return true;
  return used_in >= 0 && g[used_in].reverse && g[used_in].origin == made_in;
}

}  // namespace detail

template <std::size_t Capacity>
constexpr basic_graph<Capacity> insert_collectives(const basic_graph<Capacity>& in) {
  basic_graph<Capacity> g;
  g.axes = in.axes;
  g.error = in.error;
  if (!in.ok()) return in;
  int new_index[Capacity]{};
  // Each entry made at least one node, so the graph's capacity bounds the entries.
  static_vector<detail::redistribution_cache_entry, Capacity> cache;
  for (int i = 0; i < in.size(); ++i) {
    node n = in[i];
    if (n.region >= 0) n.region = new_index[n.region];
    if (n.origin >= 0) n.origin = new_index[n.origin];
    // Redistributions run where their consumer runs; for repeat_end that is inside the block.
    const int consumer_region = n.region;
    int first_inserted = g.size();
    for (int k = 0; k < n.input_count; ++k) {
      int source = new_index[n.inputs[k]];
      const shard_spec want = n.required[k];
      if (g[source].spec == want) {
        n.inputs[k] = source;
        continue;
      }
      int found = -1;
      for (const auto& e : cache)
        if (e.source == source && e.target == want && detail::reusable(g, e.region, consumer_region)) found = e.result;
      if (found < 0) {
        int current = source;
        for (int axis = detail::next_axis(g[current].spec, want, g.axes.size()); axis >= 0;
             axis = detail::next_axis(g[current].spec, want, g.axes.size())) {
          current = detail::add_redistribution(g, current, axis, g[current].spec[axis], want[axis], consumer_region);
          if (!g.ok()) return g;
        }
        cache.push_back({source, want, consumer_region, current});
        found = current;
      }
      n.inputs[k] = found;
    }
    int index = g.add(n);
    new_index[i] = index;
    for (int j = first_inserted; j < index; ++j) g[j].reason = index;
  }
  return g;
}

}  // namespace shardgraph::passes
