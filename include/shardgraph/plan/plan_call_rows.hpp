#pragma once
// plan_call_rows: one row per call of the bound plan's call list (plan/call_list.hpp) that this
// rank makes, as the printer (plan/print_bound_plan.hpp) shows it: the op (with what fusion adds
// to it), the node, the value it writes, the values it reads, the other values its call writes, and
// for a collective its axis and the bytes it moves.
//
//   for (const plan::call_row& r : plan::call_rows(p)) ...   // in step order, loop markers as rows
//
// A step with no call has no row (call_list.hpp says when); on a pipeline stage, neither has a call
// of a value another stage computes.
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
  std::string op;            // "linear+add_bias [linear_bias]", "add_bias+add", "all_reduce @tp"
  int out = -1;              // the value its call writes (-1: none)
  std::vector<int> reads;    // the values it reads
  std::vector<int> also;     // the other values its call writes
  std::int64_t moved = 0;    // a collective: bytes this rank puts in
  int ranks = 1;             // a collective: the ranks of its axis
  std::vector<int> buckets;  // a gradient handed to buckets: the buckets it packs into, by layer
  bool in_loop = false;      // inside a repeat block: runs once per layer
};

namespace call_detail {

inline std::size_t at(int i) { return static_cast<std::size_t>(i); }

inline void add_unique(std::vector<int>& v, int x) {
  if (x >= 0 && std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

// The values a kernel call writes besides `out`: its fused gradients, its batched products' results,
// and what the finite check reads after it; a value without memory (a product whose epilogue
// writes elsewhere) is left out.
inline std::vector<int> also_written(const bound_plan& p, const bound_call& c) {
  std::vector<int> v;
  for (int x : {c.bias_grad, c.logits_grad, c.key_grad, c.value_grad, c.weight_grad}) add_unique(v, x);
  for (const bound_call& b : c.batched) {
    add_unique(v, b.out);
    add_unique(v, b.bias_grad);
  }
  for (const checked_value& x : c.checked) add_unique(v, x.node);
  std::erase_if(v, [&](int x) {
    return x == c.out || p.memory.values[at(p.memory.place_of(x, 0).node)].kind == storage::none;
  });
  return v;
}

// A kernel or batched call: "linear+add_bias x3 [linear_bias+batched_products]" (its fused kinds in
// brackets) reads its inputs, the bias, the side value it does
// not write, and the batched products' weights and biases.
inline void kernel_row(const bound_plan& p, const bound_call& c, call_row& r) {
  const graph_view& g = p.compiled.nodes;
  r.op = std::string(op_name(g[c.node]));
  if (c.bias >= 0) r.op += "+add_bias";
  if (c.epilogue != compute::product_epilogue::none) r.op += "+" + std::string(op_name(g[c.out].kind));
  if (!c.batched.empty()) r.op += " x" + std::to_string(c.batched.size() + 1);
  if (!c.fused.empty()) r.op += " [" + c.fused.names() + "]";
  for (int k = 0; k < c.input_count; ++k) r.reads.push_back(c.in[at(k)]);
  add_unique(r.reads, c.bias);
  r.also = also_written(p, c);
  if (c.side >= 0 && std::find(r.also.begin(), r.also.end(), c.side) == r.also.end()) add_unique(r.reads, c.side);
  for (const bound_call& b : c.batched) {
    for (int k = 1; k < b.input_count; ++k) add_unique(r.reads, b.in[at(k)]);
    add_unique(r.reads, b.bias);
  }
}

// The distinct buckets the gradient of node i packs into.
inline std::vector<int> buckets_of(const gradient_bucket_plan& b, int i) {
  std::vector<int> found;
  for (const bucket_member_ref& ref : b.member_of[at(i)])
    if (ref.bucket >= 0) add_unique(found, ref.bucket);
  return found;
}

inline std::string axis_text(const bound_plan& p, int axis) {
  return " @" + std::string(p.compiled.nodes.axes.name(axis));
}

// The row of call c.
inline call_row row_of(const bound_plan& p, const bound_call& c) {
  const graph_view& g = p.compiled.nodes;
  call_row r;
  r.node = c.node;
  r.out = c.out;
  switch (c.kind) {
    case call_kind::kernel:
    case call_kind::batched:
      kernel_row(p, c, r);
      break;
    case call_kind::elementwise:
      for (int k = 0; k < c.chain_length; ++k) r.op += (k ? "+" : "") + std::string(op_name(c.chain[at(k)].kind));
      for (int k = 0; k < c.operand_count; ++k) r.reads.push_back(c.operands[at(k)]);
      break;
    case call_kind::collective:
      r.what = call_row::kind::collective;
      r.op = std::string(op_name(c.kernel)) + axis_text(p, c.axis);
      r.ranks = c.parts;
      r.moved = c.in_numel * static_cast<std::int64_t>(dtype_size(c.type));
      r.reads.push_back(c.in[0]);
      break;
    case call_kind::bucket_add:
      r.what = call_row::kind::bucket;
      r.op = std::string(op_name(c.kernel));
      if (is_collective(c.kernel)) r.op += axis_text(p, g[c.node].axis);
      r.out = g[c.node].kind == op::param_grad ? c.node : p.buckets.bucketed_grad[at(c.node)];
      r.buckets = buckets_of(p.buckets, c.node);
      r.reads.push_back(c.in[0]);
      break;
    case call_kind::slice:
      r.op = std::string(op_name(c.kernel)) + axis_text(p, c.axis);
      r.reads.push_back(c.in[0]);
      break;
    case call_kind::copy:  // a copy step, or a collective over one rank
      r.op = std::string(op_name(c.kernel)) + (is_collective(c.kernel) ? axis_text(p, g[c.node].axis) : "");
      if (is_collective(c.kernel)) r.what = call_row::kind::collective, r.moved = value_bytes(p, c.in[0]);
      r.reads.push_back(c.in[0]);
      break;
    case call_kind::gradient_sum:
      r.op = std::string(op_name(c.kernel)) + " +=";
      r.reads.push_back(c.in[0]);
      break;
    case call_kind::output:
      r.op = "output";
      r.reads.push_back(c.in[0]);
      break;
  }
  return r;
}

}  // namespace call_detail

// The rows of one step of the bound plan on this rank, in step order.
inline std::vector<call_row> call_rows(const bound_plan& p) {
  std::vector<call_row> rows;
  bool in_loop = false;
  for (std::size_t s = 0; s < p.compiled.steps.size(); ++s) {
    const step& st = p.compiled.steps[s];
    if (st.kind == step_kind::loop_begin || st.kind == step_kind::loop_end) {
      in_loop = st.kind == step_kind::loop_begin;
      call_row& marker = rows.emplace_back();
      marker.what = in_loop ? call_row::kind::loop_begin : call_row::kind::loop_end;
      marker.step = s;
      marker.node = st.node;
      continue;
    }
    for (const bound_call& c : p.calls.of_step(s)) {
      if (!p.stages.computed_here(c.node)) continue;  // another pipeline stage's
      call_row& r = rows.emplace_back(call_detail::row_of(p, c));
      r.step = s;
      r.in_loop = in_loop;
    }
  }
  return rows;
}

}  // namespace shardgraph::plan
