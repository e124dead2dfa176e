#pragma once
// Step fusion: attention in the products' layout (attention_token_major) and its backward reading
// the forward's result (fused::attention_saved), run in this order.
#include "shardgraph/plan/step_fusion_state.hpp"

namespace shardgraph::plan::detail {

inline bool is_attention_call(op k) {
  return k == op::attention || k == op::attention_grad_q || k == op::attention_grad_k ||
         k == op::attention_grad_v;
}
// The operands an attention call reads in heads layout: q, k, v (and dout for a gradient).
inline int head_operands(const node& n) { return n.kind == op::attention ? 3 : 4; }

// Whether `from`'s value can live in `to`'s buffer: `to` is its one reader, a layout step
// (`layout_op`) computed alone, and `from` is written by its own step, alike in type, place and size.
inline bool held_in(const fusion_state& s, int from, int to, op layout_op) {
  const graph_view& g = s.nodes();
  const std::size_t st = s.step_of(from);
  if (g[to].kind != layout_op || !s.computed_alone(to) || !s.only_reader(from, to) ||
      st == step_index::no_step)
    return false;
  const step& producer = s.steps()[st];
  return producer.node == from &&
         (producer.kind == step_kind::compute || producer.kind == step_kind::fused) &&
         g[from].type == g[to].type && g[from].region == g[to].region &&
         s.in.layout.of(from).numel() == s.in.layout.of(to).numel() &&
         s.in.recomputed[at(from)] == s.in.recomputed[at(to)];
}

// Whether attention call i can stay token-major: each split of heads it reads is held in place and
// read only by token-major calls, and its result is held in its one reader, a merge of heads.
inline bool stays_token_major(const fusion_state& s, int i) {
  const graph_view& g = s.nodes();
  const auto split_in_place = [&](int split) {
    if (!held_in(s, g[split].inputs[0], split, op::split_heads)) return false;
    for (int r : s.readers(split))
      if (!s.plan.token_major[at(r)]) return false;
    return true;
  };
  if (s.readers(i).size() != 1 || !held_in(s, i, s.readers(i)[0], op::merge_heads)) return false;
  for (int k = 0; k < head_operands(g[i]); ++k)
    if (!split_in_place(g[i].inputs[k])) return false;
  return true;
}

// Attention in the products' layout (fused::attention_token_major): a split_heads
// whose readers are all attention (or its gradients) is skipped, its input's step writing the bytes
// straight into its buffer ((batch, seq, heads, head_dim) is the input's layout); an attention's
// (or gradient's) result read only by a merge_heads is written straight into the merge's buffer, and
// the merge skipped. The attention calls then say token_major. All or nothing per call: each of its
// q, k, v (and dout) must come so and its result leave so.
inline void plan_token_major_attention(fusion_state& s) {
  if (!s.introduces(compute::fused::attention_token_major)) return;
  const graph_view& g = s.nodes();
  for (int i = 0; i < g.size(); ++i)
    s.plan.token_major[at(i)] = is_attention_call(g[i].kind) && s.computed_alone(i);
  for (bool changed = true; changed;) {  // dropping one call may leave a split another needs
    changed = false;
    for (int i = 0; i < g.size(); ++i)
      if (s.plan.token_major[at(i)] && !stays_token_major(s, i))
        s.plan.token_major[at(i)] = false, changed = true;
  }
  for (int i = 0; i < g.size(); ++i) {
    if (!s.plan.token_major[at(i)]) continue;
    for (int k = 0; k < head_operands(g[i]); ++k) {
      const int split = g[i].inputs[k];
      s.plan.stored_in[at(g[split].inputs[0])] = split;
      s.plan.stored_from[at(split)] = g[split].inputs[0];
      s.take_over(split, g[split].inputs[0]);
    }
    const int merge = s.readers(i)[0];
    s.plan.stored_in[at(i)] = merge;
    s.plan.stored_from[at(merge)] = i;
    s.take_over(merge, i);
  }
}

// Whether an attention gradient is computed under the masking and the mask of attention `forward`.
inline bool masked_alike(const node& forward, const node& gradient) {
  return forward.masking == gradient.masking && forward.input_count + 1 == gradient.input_count &&
         (forward.input_count < 4 || forward.inputs[3] == gradient.inputs[4]);
}

// fused::attention_saved: an attention gradient reads the forward's result
// (kernel_call::side) where that result stays in memory of its own until then: a token-major result
// held in its merge's per-layer buffer, which the backward keeps anyway (the projection's weight
// gradient reads it). No value is kept longer for it. The forward's call says output_kept.
inline void plan_attention_output_reuse(fusion_state& s) {
  if (!s.introduces(compute::fused::attention_saved)) return;
  const graph_view& g = s.nodes();
  for (int i = 0; i < g.size(); ++i) {
    if (!s.plan.token_major[at(i)] || g[i].kind == op::attention) continue;  // a token-major gradient
    for (int a : s.readers(g[i].inputs[0])) {  // its forward: the attention of these q, k, v
      if (!masked_alike(g[a], g[i])) continue;
      if (g[a].kind != op::attention || g[a].inputs[1] != g[i].inputs[1] ||
          g[a].inputs[2] != g[i].inputs[2] || !s.plan.token_major[at(a)] || s.plan.stored_in[at(a)] < 0 ||
          !s.in.kept_per_layer[at(s.plan.stored_in[at(a)])])
        continue;
      s.plan.forward_output_of[at(i)] = a;
      s.plan.output_kept[at(a)] = true;
    }
  }
}

}  // namespace shardgraph::plan::detail
