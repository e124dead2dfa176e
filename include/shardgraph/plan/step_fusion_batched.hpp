#pragma once
// Step fusion: products of the same sizes and input run as one batched call (fused::batched_products).
// Run last: it reads every other pass's epilogues and moved steps.
#include "shardgraph/plan/step_fusion_state.hpp"

namespace shardgraph::plan::detail {

// Whether product i may run in a batch: a linear or linear_weight_grad computed alone, not batched
// yet, not recomputed; a linear with no epilogue but its bias, its weight and bias parameters.
inline bool batchable(const fusion_state& s, int i) {
  const graph_view& g = s.nodes();
  const node& n = g[i];
  if ((n.kind != op::linear && n.kind != op::linear_weight_grad) || !s.computed_alone(i) ||
      s.plan.taken_over_by[at(i)] >= 0 || s.in.recomputed[at(i)])
    return false;
  if (n.kind == op::linear_weight_grad) return true;
  const int bias_add = s.plan.bias_epilogue_of[at(i)];
  return s.plan.epilogue_of[at(i)].out < 0 && g[n.inputs[1]].kind == op::parameter &&
         (bias_add < 0 || g[g[bias_add].inputs[1]].kind == op::parameter);
}

// Whether batchable product j runs in first product i's call: the same kind, input, type, region,
// transposition and local sizes, a later step, and the same bias (a bias add, or a bias gradient);
// a weight gradient's dy written before i's step.
inline bool batches_with(const fusion_state& s, int i, int j) {
  const graph_view& g = s.nodes();
  const node& n = g[i];
  const node& m = g[j];
  const local_layout& layout = s.in.layout;
  if (j == i || !batchable(s, j) || m.kind != n.kind || m.inputs[0] != n.inputs[0] || m.type != n.type ||
      m.region != n.region || m.transpose_b != n.transpose_b || s.step_of(j) <= s.step_of(i) ||
      g[m.inputs[1]].type != g[n.inputs[1]].type ||
      layout.of(m.inputs[1]).local != layout.of(n.inputs[1]).local ||
      layout.of(j).local != layout.of(i).local)
    return false;
  if (n.kind == op::linear)
    return (s.plan.bias_epilogue_of[at(j)] < 0) == (s.plan.bias_epilogue_of[at(i)] < 0);
  return (s.plan.bias_grad_of[at(j)] < 0) == (s.plan.bias_grad_of[at(i)] < 0) &&
         s.step_of(s.plan.writer_of(g, m.inputs[1])) < s.step_of(i);
}

// fused::batched_products: products of the same sizes that read the same input run
// as one batched call at the first one's step (kernel_call::batch), where their buffers lie at equal
// strides (bind places them so). Attention's q, k and v: three (model, model) products of the same
// normed x forward, and three weight gradients of that x and dq, dk, dv backward; one batched product
// fills the GPU better than three small ones. Each other product's weight and bias are parameters, or
// its dy is written before the first one's step (dk and dv, made with dq), and its results are
// written before their own steps, where nothing can have read them yet: their lifetimes then start
// at the first one's step. A product with an epilogue other than its bias (gelu, add) is not
// batched. Pipelines (micro-batch banks) and ZeRO-3 (gathered weights) are left out.
inline void plan_products_batched(fusion_state& s) {
  if (!s.introduces(compute::fused::batched_products) || s.in.pipelined || s.in.program.zero_stage >= 3) return;
  const graph_view& g = s.nodes();
  for (const step& st : s.steps()) {
    const int i = st.node;
    if (st.kind != step_kind::compute || !batchable(s, i) || !s.plan.batched_with[at(i)].empty()) continue;
    const std::size_t first_step = s.step_of(i);
    for (int j : s.readers(g[i].inputs[0])) {
      if (!batches_with(s, i, j)) continue;
      s.plan.batched_with[at(i)].push_back(j);
      s.take_over(j, i, first_step);
      if (const int bias = s.plan.bias_grad_of[at(j)]; bias >= 0) s.written_at[at(bias)] = first_step;
    }
  }
}

}  // namespace shardgraph::plan::detail
