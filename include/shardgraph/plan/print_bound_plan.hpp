#pragma once
// print(bound_plan, out): one rank's bound plan as text, so that a user can read what one step of
// their layout does on that rank and how much memory it holds (inspect_layout --bound prints it).
//
//   print(rank.plan(), std::cout);
//
// Per rank: its mesh coordinates and sizes; its pipeline stage; every call of one step in order
// (a loop body once, marked with its layer count), each with its op, node, local shape, the buffer
// it writes and those it reads (arena byte offset, layer block, parameter, gradient, own memory;
// size), the other values a fused call writes, and for a collective its axis and bytes; the memory
// bind allocated by kind, the arena among it; the gradient buckets; ZeRO-3's gathers. Offsets and
// places are those of a loop's first layer on this rank.
//
//    step  op                         node                         local shape      writes                           reads
//      20    linear+add_bias+gelu     h.mlp.c_fc                   (2, 16, 64)      [own, per layer, 8.0 KiB]        h.ln_2 [own, per ...
//      24    all_reduce @tp           h.mlp.c_proj                 (2, 16, 32)      [own, 4.0 KiB]                   4.0 KiB over tp (2 ...
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "shardgraph/pipeline/schedule.hpp"
#include "shardgraph/plan/bound_plan.hpp"
#include "shardgraph/plan/call_count.hpp"
#include "shardgraph/plan/plan_call_rows.hpp"
#include "shardgraph/plan/plan_text.hpp"
#include "shardgraph/plan/print_plan_memory.hpp"

namespace shardgraph::plan {

namespace print_detail {

inline std::size_t at(int i) { return static_cast<std::size_t>(i); }

// "batch 8, seq 16, experts 8, patches 196": batch and seq, then the user's dimensions
// (dim::named), each only if the program uses it, the user's in the order of their first use.
inline std::string sizes_text(const bound_plan& p) {
  const graph_view& g = p.compiled.nodes;
  std::vector<const dimension*> used;
  for (int i = 0; i < g.size(); ++i)
    for (int k = 0; k < g[i].shape.rank(); ++k)
      for (const dimension* d : {g[i].shape[k].first, g[i].shape[k].second})
        if (d != nullptr && std::find(used.begin(), used.end(), d) == used.end()) used.push_back(d);
  std::string text;
  auto show = [&](const dimension* d) {
    text += (text.empty() ? "" : ", ") + std::string(dimension_name(d)) + " " + std::to_string(p.sizes.get(d));
  };
  for (extent e : {dim::batch, dim::seq})
    if (std::find(used.begin(), used.end(), e.first) != used.end()) show(e.first);
  for (const dimension* d : used)
    if (d->builtin == size_symbol::none && d->fixed == 0) show(d);
  return text;
}

// "rank 3: dp=1 tp=1 of mesh dp=2 tp=2; batch 8, seq 16, 2 layers; training, ZeRO-1, buckets of 25.0 MiB"
inline void print_header(const bound_plan& p, std::ostream& out) {
  const graph_view& g = p.compiled.nodes;
  std::string coordinates, mesh;
  for (int a = 0; a < g.axes.size(); ++a) {
    const std::string name(g.axes.name(a));
    coordinates += (a ? " " : "") + name + "=" + std::to_string(p.layout.coordinate(a));
    mesh += (a ? " " : "") + name + "=" + std::to_string(p.axis_sizes[at(a)]);
  }
  const std::string sizes = sizes_text(p);
  out << "rank " << p.world_rank << ": " << coordinates << " of mesh " << mesh << "; " << sizes
      << (sizes.empty() ? "" : ", ") << count_text(p.steps.layers, "layer") << "; ";
  if (!p.compiled.is_training()) {
    out << "inference\n";
    return;
  }
  out << "training, ZeRO-" << p.compiled.zero_stage << ", "
      << (p.compiled.bucket_bytes > 0 ? "buckets of " + bytes_text(p.compiled.bucket_bytes) : "no buckets")
      << (p.compiled.recompute == recompute::none ? "" : ", recomputation") << '\n';
}

inline void print_pipeline(const bound_plan& p, std::ostream& out) {
  const pipeline_stages& st = p.stages;
  if (!st.pipelined()) {
    out << "pipeline  none: this rank runs every layer\n";
    return;
  }
  out << "pipeline  stage " << st.coordinate << " of " << st.schedule.ranks << " on "
      << p.compiled.nodes.axes.name(st.axis) << " (" << pipeline::schedule_name(st.schedule.kind) << ", "
      << st.schedule.micro_batches << " micro-batches): layers";
  for (const auto& [first, end] : st.chunks) out << " [" << first << ", " << end << ")";
  out << (st.holds_first ? "; the embeddings" : "") << (st.holds_last ? "; the head and the loss" : "") << "; "
      << count_text(st.banks, "micro-batch slot") << ", " << count_text(st.inbox, "receive buffer")
      << "; activations and their gradients cross stages by send and recv\n";
}

// What a loop marker row says: the block, its layers on this rank, ZeRO-3's gathers, recomputation.
inline std::string loop_text(const bound_plan& p, const call_row& r) {
  const graph_view& g = p.compiled.nodes;
  const node& n = g[r.node];
  if (r.what == call_row::kind::loop_end) return "end of " + node_name(p, n.region);
  std::string t = "loop " + node_name(p, r.node) + " x " + count_text(held_layers(p), "layer") +
                  (n.reverse ? " (backward: last layer first)" : "");
  if (p.zero3.on() && !p.zero3.layer_weights[at(r.node)].empty())
    t += "; ZeRO-3 gathers its " + std::to_string(p.zero3.layer_weights[at(r.node)].size()) +
         " weights per layer, the next layer's ahead";
  if (n.reverse && !p.recomputed_steps.empty())
    t += "; runs " + std::to_string(p.recomputed_steps.size()) + " forward steps again per layer";
  return t;
}

// "h.ln_1 [arena+0, 2.0 KiB], h.attn.c_attn.weight [parameter, per layer, 12.0 KiB]"
inline std::string reads_text(const bound_plan& p, const call_row& r, std::int64_t layer) {
  std::string t;
  for (int v : r.reads) t += (t.empty() ? "" : ", ") + buffer_text(p, v, layer);
  return t;
}

// "packs into bucket 0", or for a loop body's gradient "packs into buckets 1, 5 (by layer)".
inline std::string buckets_text(std::vector<int> buckets) {
  std::sort(buckets.begin(), buckets.end());
  if (buckets.size() == 1) return "packs into bucket " + std::to_string(buckets.front());
  std::string t = "packs into buckets ";
  for (std::size_t k = 0; k < buckets.size(); ++k) t += (k ? ", " : "") + std::to_string(buckets[k]);
  return t + " (by layer)";
}

// One row of the calls table (and a line per other value a fused call writes).
inline void print_row(const bound_plan& p, const call_row& r, std::int64_t layer, const std::string& indent,
                      std::ostream& out) {
  std::string number = std::to_string(r.step);
  if (number.size() < 5) number.insert(0, 5 - number.size(), ' ');
  out << number << "  " << column(indent + r.op, 26) << column(node_name(p, r.node), 28)
      << column(local_shape_text(p, r.node), 16)
      << column(placed_text(p, r.out, layer), 32);
  if (r.what == call_row::kind::collective)
    out << bytes_text(r.moved) << " over " << p.compiled.nodes.axes.name(p.compiled.nodes[r.node].axis) << " ("
        << r.ranks << (r.ranks == 1 ? " rank: a copy" : " ranks") << ") <- " << reads_text(p, r, layer);
  else if (r.what == call_row::kind::bucket)
    out << buckets_text(r.buckets) << " <- " << reads_text(p, r, layer);
  else
    out << reads_text(p, r, layer);
  out << '\n';
  for (int v : r.also) out << std::string(7, ' ') << indent << "+ writes " << buffer_text(p, v, layer) << '\n';
}

// The calls of one step, in order; a loop body once, at the first layer this rank runs.
inline void print_calls(const bound_plan& p, std::ostream& out) {
  const std::vector<call_row> rows = call_rows(p);
  out << "\ncalls of one step (a loop body once, at its first layer on this rank; "
      << (p.calls.seed_is_one ? "no loss scale" : "under a loss scale") << ")\n"
      << " step  " << column("op", 26) << column("node", 28) << column("local shape", 16) << column("writes", 32)
      << "reads\n";
  std::string indent;
  std::int64_t layer = 0, collectives = 0;
  const std::int64_t first = p.stages.pipelined() ? p.stages.chunks.front().first : 0;
  const std::int64_t last = p.stages.pipelined() ? p.stages.chunks.back().second - 1 : p.steps.layers - 1;
  for (const call_row& r : rows) {
    if (r.what == call_row::kind::loop_end) indent.resize(indent.size() >= 2 ? indent.size() - 2 : 0);
    if (r.what == call_row::kind::loop_begin || r.what == call_row::kind::loop_end) {
      out << std::string(7, ' ') << indent << loop_text(p, r) << '\n';
      if (r.what == call_row::kind::loop_begin) indent += "  ";
      layer = r.what == call_row::kind::loop_end ? 0 : p.compiled.nodes[r.node].reverse ? last : first;
      continue;
    }
    print_row(p, r, layer, indent, out);
    if (r.what == call_row::kind::collective && r.ranks > 1) collectives += r.in_loop ? held_layers(p) : 1;
  }
  const auto listed = std::count_if(rows.begin(), rows.end(), [](const call_row& r) {
    return r.what != call_row::kind::loop_begin && r.what != call_row::kind::loop_end;
  });
  out << "  " << listed << " calls listed; " << collectives << " collectives a step";
  if (!p.stages.pipelined())  // plan/call_count.hpp: with loop bodies per layer, recomputation and loop copies
    out << ", " << count_backend_calls(p.compiled, p.calls, p.steps, p.memory, p.recomputed_steps)
        << " compute-backend calls a step";
  out << '\n';
}

}  // namespace print_detail

// Prints `p` (see the header comment).
inline void print(const bound_plan& p, std::ostream& out) {
  print_detail::print_header(p, out);
  print_detail::print_pipeline(p, out);
  print_detail::print_calls(p, out);
  print_plan_memory(p, out);
  print_plan_buckets(p, out);
  print_plan_zero3(p, out);
}

}  // namespace shardgraph::plan

namespace shardgraph {
using plan::print;
}  // namespace shardgraph
