#pragma once
// plan_step_fusion: the fusion rewrite. It plans the calls of fused kinds (compute/fused_kinds.hpp)
// that take over steps of a rank's program (plan/step_fusion.hpp), from the program and the kinds
// plan::backend_traits::fused lets it introduce (none: nothing fused, every step runs).
//
//   plan::step_fusion f = plan::plan_step_fusion({.program = p, .steps = idx, .layout = layout,
//                                                 .recomputed = r, .kept_per_layer = k},
//                                                plan::traits_of<cpu::backend>());
//   plan::apply_producer_moves(f, idx);
//
// The passes (plan/step_fusion_*.hpp) run in a fixed order, each reading what the earlier ones
// planned: bias epilogues, bias gradient epilogues, elementwise epilogues, token-major attention,
// attention output reuse, cross-entropy statistics, the logits' gradient with the loss, attention
// gradients together, norm gradients together, batched products.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/plan/backend_traits.hpp"
#include "shardgraph/plan/step_fusion.hpp"
#include "shardgraph/plan/step_fusion_attention.hpp"
#include "shardgraph/plan/step_fusion_batched.hpp"
#include "shardgraph/plan/step_fusion_cross_entropy.hpp"
#include "shardgraph/plan/step_fusion_epilogues.hpp"
#include "shardgraph/plan/step_fusion_gradients.hpp"
#include "shardgraph/plan/step_fusion_state.hpp"

namespace shardgraph::plan {

namespace detail {

// A plan of `nodes` nodes in which nothing is fused.
inline step_fusion nothing_fused(std::size_t nodes) {
  step_fusion f;
  f.bias_epilogue_of.assign(nodes, -1);
  f.bias_done_by_product.assign(nodes, false);
  f.bias_grad_of.assign(nodes, -1);
  f.epilogue_of.assign(nodes, {});
  f.written_by_product.assign(nodes, -1);
  f.held_in_epilogue.assign(nodes, false);
  f.stored_in.assign(nodes, -1);
  f.stored_from.assign(nodes, -1);
  f.token_major.assign(nodes, false);
  f.forward_output_of.assign(nodes, -1);
  f.output_kept.assign(nodes, false);
  f.key_grad_of.assign(nodes, -1);
  f.value_grad_of.assign(nodes, -1);
  f.weight_grad_of.assign(nodes, -1);
  f.logits_grad_of.assign(nodes, -1);
  f.batched_with.assign(nodes, {});
  f.taken_over_by.assign(nodes, -1);
  f.written_by_call.assign(nodes, {});
  return f;
}

// Follows each taken_over_by to the call that runs: a value taken over by a node that is itself
// taken over (a bias gradient of a batched weight gradient, a split of heads holding a value a
// product's epilogue writes) names the last. Each step hands its value to a call that is not handed
// back, so every chain ends within the node count.
inline void follow_takers(step_fusion& f) {
  for (int& by : f.taken_over_by)
    for (std::size_t hops = 0; by >= 0 && f.taken_over_by[at(by)] >= 0 && hops < f.taken_over_by.size();
         ++hops)
      by = f.taken_over_by[at(by)];
}

// The values each call writes besides its own, in the order the finite check reads them: a bias
// gradient, the logits' gradient, the key's and value's gradients, a norm's weight gradient and its
// bias gradient, each batched product with its bias add and bias gradient, then the product's bias
// add and epilogue output (named as the product). A node taken over makes no call: its list is empty.
inline void list_written_values(step_fusion& f) {
  using written = step_fusion::written_value;
  for (std::size_t i = 0; i < f.written_by_call.size(); ++i) {
    if (f.taken_over_by[i] >= 0) continue;
    const int node = static_cast<int>(i);
    std::vector<written>& w = f.written_by_call[i];
    const auto add = [&](int v, int reported) {
      if (v >= 0) w.push_back({v, reported});
    };
    add(f.bias_grad_of[i], f.bias_grad_of[i]);
    add(f.logits_grad_of[i], f.logits_grad_of[i]);
    add(f.key_grad_of[i], f.key_grad_of[i]);
    add(f.value_grad_of[i], f.value_grad_of[i]);
    if (const int weight = f.weight_grad_of[i]; weight >= 0) {
      add(weight, weight);
      add(f.bias_grad_of[at(weight)], f.bias_grad_of[at(weight)]);
    }
    for (int j : f.batched_with[i]) {
      add(j, j);
      add(f.bias_epilogue_of[at(j)], j);
      add(f.bias_grad_of[at(j)], f.bias_grad_of[at(j)]);
    }
    add(f.bias_epilogue_of[i], node);
    add(f.epilogue_of[i].out, node);
  }
}

// The producer steps the passes moved, in node order.
inline std::vector<step_fusion::producer_move> moved_steps(const fusion_state& s) {
  std::vector<step_fusion::producer_move> moves;
  for (std::size_t i = 0; i < s.written_at.size(); ++i)
    if (s.written_at[i] != s.in.steps.producer_step[i])
      moves.push_back({static_cast<int>(i), s.written_at[i]});
  return moves;
}

}  // namespace detail

inline step_fusion plan_step_fusion(const step_fusion_inputs& in, const backend_traits& traits) {
  const std::size_t nodes = static_cast<std::size_t>(in.program.nodes.size());
  if (in.steps.producer_step.size() != nodes || in.recomputed.size() != nodes ||
      in.kept_per_layer.size() != nodes)
    fail("bind: plan_step_fusion",
         "the step index and the per-node inputs do not have the program's " + std::to_string(nodes) +
             " nodes",
         "index this program's steps, and give recomputed and kept_per_layer one entry per node");
  detail::fusion_state s{in, traits, detail::nothing_fused(nodes), in.steps.producer_step};
  detail::plan_bias_epilogues(s);
  detail::plan_bias_grad_epilogues(s);
  detail::plan_product_epilogues(s);
  detail::plan_token_major_attention(s);
  detail::plan_attention_output_reuse(s);
  detail::plan_cross_entropy_statistics(s);
  detail::plan_cross_entropy_gradient_with_loss(s);
  detail::plan_attention_gradients_together(s);
  detail::plan_norm_gradients_together(s);
  detail::plan_products_batched(s);
  detail::follow_takers(s.plan);
  detail::list_written_values(s.plan);
  s.plan.producer_moves = detail::moved_steps(s);
  return std::move(s.plan);
}

}  // namespace shardgraph::plan
