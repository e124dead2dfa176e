#pragma once
// plan_call_rows: one row per call a step of the bound plan makes on this rank, as the printer
// (plan/print_bound_plan.hpp) shows it: the op, the node, the value it writes, the values it reads,
// the other values its call writes (fusion), and for a collective its axis and the bytes it moves.
//
//   for (const plan::call_row& r : plan::call_rows(p)) ...   // in step order, loop markers as rows
//
// A step makes no call, and has no row, where another node's call writes its value (fusion), its
// producer wrote it in place, a gradient bucket writes it, only outputs that forward() leaves out
// read it, or (pipelines) another stage computes it. The backward's seed is taken as 1 (no loss
// scale): a loss's call then writes the logits' gradient too.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/plan/plan_text.hpp"

namespace shardgraph::plan {

struct call_row {
  enum class kind { call, collective, bucket, loop_begin, loop_end };
  kind what = kind::call;
  std::size_t step = 0;
  int node = -1;
  std::string op;              // "linear", "add+gelu", "all_reduce @tp"
  int out = -1;                // the value its call writes (-1: none)
  std::vector<int> reads;      // the values it reads
  std::vector<int> also;       // the other values its call writes
  std::int64_t moved = 0;      // a collective: bytes this rank sends into it
  int ranks = 1;               // a collective: the ranks of its axis
  std::vector<int> buckets;    // a bucketed gradient: the buckets it packs into, one per layer it runs
  bool in_loop = false;        // inside a repeat block: runs once per layer
};

namespace call_detail {

inline std::size_t at(int i) { return static_cast<std::size_t>(i); }

// The value a product's call writes: its epilogue's output, or the add_bias it absorbs, else its own.
inline int written_value(const step_fusion& f, int i) {
  if (f.epilogue_of[at(i)].out >= 0) return f.epilogue_of[at(i)].out;
  if (f.bias_epilogue_of[at(i)] >= 0) return f.bias_epilogue_of[at(i)];
  return i;
}

// A compute step's call: its inputs, the bias of an absorbed add_bias, an epilogue's side input.
inline void compute_row(const bound_plan& p, int i, call_row& r) {
  const graph& g = p.compiled.nodes;
  const step_fusion& f = p.fusion;
  r.op = std::string(op_name(g[i].kind));
  r.out = written_value(f, i);
  for (int k = 0; k < g[i].input_count; ++k) r.reads.push_back(g[i].inputs[k]);
  if (const int j = f.bias_epilogue_of[at(i)]; j >= 0) {
    r.op += "+add_bias";
    r.reads.push_back(g[j].inputs[1]);
  }
  const auto written = f.written_by(i, true);
  const auto writes = [&](int v) {
    return std::any_of(written.begin(), written.end(), [&](const step_fusion::written_value& w) { return w.node == v; });
  };
  if (const step_fusion::epilogue& e = f.epilogue_of[at(i)]; e.out >= 0) {
    r.op += "+" + std::string(op_name(g[e.out].kind));
    if (e.side >= 0 && !writes(e.side)) r.reads.push_back(e.side);  // else the value it saves for backward
  }
  if (!f.batched_with[at(i)].empty()) r.op += " x" + std::to_string(f.batched_with[at(i)].size() + 1);
  for (const int j : f.batched_with[at(i)]) {  // the same first input: the others' weights and biases
    for (int k = 1; k < g[j].input_count; ++k) r.reads.push_back(g[j].inputs[k]);
    if (const int b = f.bias_epilogue_of[at(j)]; b >= 0) r.reads.push_back(g[b].inputs[1]);
  }
  for (const step_fusion::written_value& w : written) {  // a product whose epilogue writes elsewhere has no bytes
    const int holder = p.memory.place_of(w.node, 0).node;
    if (w.node != r.out && p.memory.values[at(holder)].kind != storage::none) r.also.push_back(w.node);
  }
}

// An elementwise chain [first, last]: one call reading the chain's first input (or its first
// node's value, when a product added the bias) and each other operand.
inline void chain_row(const bound_plan& p, int first, int last, call_row& r) {
  const graph& g = p.compiled.nodes;
  const bool bias_done = p.fusion.bias_done_by_product[at(first)];
  r.out = last;
  r.reads.push_back(bias_done ? first : g[first].inputs[0]);
  for (int j = bias_done ? first + 1 : first; j <= last; ++j) {
    r.op += (r.op.empty() ? "" : "+") + std::string(op_name(g[j].kind));
    if (j == first && g[j].input_count > 1) r.reads.push_back(g[j].inputs[1]);
    if (j != first && g[j].input_count > 1) r.reads.push_back(g[j].inputs[0] == j - 1 ? g[j].inputs[1] : g[j].inputs[0]);
  }
}

// The distinct buckets node i packs into, in the order its layers fill them.
inline std::vector<int> buckets_of(const gradient_bucket_plan& b, int i) {
  std::vector<int> found;
  for (const bucket_member_ref& ref : b.member_of[at(i)])
    if (ref.bucket >= 0 && std::find(found.begin(), found.end(), ref.bucket) == found.end())
      found.push_back(ref.bucket);
  return found;
}

// A collective on `axis`: the bytes this rank puts in (an all_gather's input, the others' whole input).
inline void collective_row(const bound_plan& p, int i, call_row& r) {
  const node& n = p.compiled.nodes[i];
  r.what = call_row::kind::collective;
  r.op = std::string(op_name(n.kind)) + " @" + std::string(p.compiled.nodes.axes.name(n.axis));
  r.out = i;
  r.reads.push_back(n.inputs[0]);
  r.ranks = p.axis_sizes[at(n.axis)];
  r.moved = value_bytes(p, n.inputs[0]);
  if (p.buckets.bucketed_grad[at(i)] >= 0) {
    r.what = call_row::kind::bucket;
    r.out = p.buckets.bucketed_grad[at(i)];
    r.buckets = buckets_of(p.buckets, i);
  }
}

// Whether step s of node i makes a call on this rank (see the header comment).
inline bool makes_call(const bound_plan& p, const step& st) {
  const int i = st.node;
  const node& n = p.compiled.nodes[i];
  if (p.memory.unread[at(i)] || !p.stages.computed_here(i)) return false;
  switch (st.kind) {
    case step_kind::compute:
    case step_kind::fused:
      return p.fusion.runs(i, true);
    case step_kind::copy:
      if (p.buckets.written_by_bucket[at(i)]) return false;
      return p.memory.values[at(n.inputs[0])].written_into != i || p.buckets.scattered_grad[at(i)];
    default:
      return true;
  }
}

}  // namespace call_detail

// The rows of one step of the bound plan on this rank, in step order.
inline std::vector<call_row> call_rows(const bound_plan& p) {
  using namespace call_detail;
  const graph& g = p.compiled.nodes;
  std::vector<call_row> rows;
  bool in_loop = false;
  for (std::size_t s = 0; s < p.compiled.steps.size(); ++s) {
    const step& st = p.compiled.steps[s];
    const int i = st.node;
    call_row r;
    r.step = s;
    r.node = i;
    r.in_loop = in_loop;
    if (st.kind == step_kind::loop_begin || st.kind == step_kind::loop_end) {
      in_loop = st.kind == step_kind::loop_begin;
      r.what = in_loop ? call_row::kind::loop_begin : call_row::kind::loop_end;
      rows.push_back(std::move(r));
      continue;
    }
    if (!makes_call(p, st)) continue;
    if (st.kind == step_kind::compute && is_elementwise(g[i].kind))
      chain_row(p, i, i, r);
    else if (st.kind == step_kind::compute)
      compute_row(p, i, r);
    else if (st.kind == step_kind::fused)
      chain_row(p, st.first, i, r);
    else if (st.kind == step_kind::communicate)
      collective_row(p, i, r);
    else {  // slice, copy, output
      r.op = std::string(op_name(g[i].kind));
      if (is_redistribution(g[i].kind)) r.op += " @" + std::string(g.axes.name(g[i].axis));
      r.out = i;
      r.reads.push_back(g[i].inputs[0]);
      if (st.kind == step_kind::copy && p.buckets.scattered_grad[at(i)]) {
        r.what = call_row::kind::bucket;
        r.buckets = buckets_of(p.buckets, i);
      }
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace shardgraph::plan
