#pragma once
// Step fusion: backward calls that write several gradients at once: attention's query, key and value
// gradients (attention_gradients_together) and a norm's input and weight gradients
// (norm_gradients_together). Run after the bias gradient, attention layout and cross-entropy passes.
#include "shardgraph/plan/step_fusion_state.hpp"

namespace shardgraph::plan::detail {

// The gradient of `kind` (attention_grad_k or _v) with attention_grad_q i's operands, computed alone
// at or after i's step, alike in region, type and layout (-1: none).
inline int attention_sibling(const fusion_state& s, int i, op kind) {
  const graph_view& g = s.nodes();
  for (int j : s.readers(g[i].inputs[0])) {
    if (g[j].kind != kind || !s.computed_alone(j) || g[j].region != g[i].region || g[j].type != g[i].type ||
        s.plan.token_major[at(j)] != s.plan.token_major[at(i)] ||
        s.plan.forward_output_of[at(j)] != s.plan.forward_output_of[at(i)] || s.step_of(j) < s.step_of(i))
      continue;
    bool same_operands = g[j].input_count == g[i].input_count && g[j].masking == g[i].masking;
    for (int k = 0; k < g[i].input_count; ++k) same_operands = same_operands && g[j].inputs[k] == g[i].inputs[k];
    if (same_operands) return j;
  }
  return -1;
}

// fused::attention_backward: an attention_grad_q call also writes the
// attention_grad_k and _v of the same operands (a flash backward makes all three at once), whose
// steps are then skipped. They come after it (autodiff emits q, k, v in turn), so dk and dv are
// written before their own steps, where nothing can have read them yet: their lifetimes then start
// at the query gradient's step (the memory plan).
inline void plan_attention_gradients_together(fusion_state& s) {
  if (!s.introduces(compute::fused::attention_backward)) return;
  const graph_view& g = s.nodes();
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::attention_grad_q || !s.computed_alone(i)) continue;
    const int k = attention_sibling(s, i, op::attention_grad_k),
              v = attention_sibling(s, i, op::attention_grad_v);
    if (k < 0 || v < 0) continue;
    s.plan.key_grad_of[at(i)] = k;
    s.plan.value_grad_of[at(i)] = v;
    const std::size_t query_step = s.step_of(i);
    for (int j : {k, v}) s.take_over(j, i, query_step);
  }
}

// Whether norm weight gradient j (of kind weight_kind) reads input gradient i's x and dy and can be
// written by i's call: computed alone at or after i's step, alike in region, type and epsilon, and
// not paired yet.
inline bool pairs_with_input_grad(const fusion_state& s, int i, int j, op weight_kind) {
  const graph_view& g = s.nodes();
  return g[j].kind == weight_kind && g[j].inputs[0] == g[i].inputs[0] && g[j].inputs[1] == g[i].inputs[2] &&
         s.computed_alone(j) && g[j].region == g[i].region && g[j].type == g[i].type &&
         g[j].scalar == g[i].scalar && s.step_of(j) >= s.step_of(i) && s.plan.taken_over_by[at(j)] < 0;
}

// fused::norm_backward: a norm's input gradient call also writes the
// weight gradient of the same x and dy (and the bias gradient paired with that), whose step is then
// skipped: one pass over x and dy for all three. The weight gradient comes after the input gradient
// (autodiff emits x's first), so it and its bias gradient are written before their own steps, where
// nothing can have read them yet: their lifetimes then start at the input gradient's step. Under
// tensor parallelism dy differs (the weight gradient reads the all-reduced one), and nothing pairs.
inline void plan_norm_gradients_together(fusion_state& s) {
  if (!s.introduces(compute::fused::norm_backward)) return;
  const graph_view& g = s.nodes();
  for (int i = 0; i < g.size(); ++i) {
    const op kind = g[i].kind;
    if ((kind != op::layer_norm_grad_x && kind != op::rms_norm_grad_x) || !s.computed_alone(i)) continue;
    const op weight_kind = kind == op::layer_norm_grad_x ? op::layer_norm_grad_w : op::rms_norm_grad_w;
    const std::size_t input_step = s.step_of(i);
    for (int j : s.readers(g[i].inputs[0])) {
      if (!pairs_with_input_grad(s, i, j, weight_kind)) continue;
      s.plan.weight_grad_of[at(i)] = j;
      s.take_over(j, i, input_step);
      if (const int bias = s.plan.bias_grad_of[at(j)]; bias >= 0) s.written_at[at(bias)] = input_step;
      break;
    }
  }
}

}  // namespace shardgraph::plan::detail
