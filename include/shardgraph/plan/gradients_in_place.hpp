#pragma once
// gradients_in_place: the parameter gradients whose step writes them straight into their
// param_grad's memory.
//
//   const std::vector<int> written_into = plan::plan_gradients_in_place(in, m.materialized);
//   written_into[v];   // the param_grad whose memory value v is (-1: its own)
//
// A parameter gradient computed by one step and read only by its param_grad (the weight product
// of a linear, alone or batched, a bias's column sum, a norm weight's gradient) is written by that
// step into the param_grad's memory, for the layer running, instead of into a value of its own
// that a copy step then moves: one copy fewer per gradient and layer. Gradients that a collective,
// a bucket or a pipeline's micro-batch sum delivers keep their copy or sum step; so does every
// gradient with memory_options{.reuse = false}.
#include <cstddef>
#include <vector>

#include "shardgraph/plan/memory_inputs.hpp"
#include "shardgraph/plan/per_layer.hpp"

namespace shardgraph::plan {

inline std::vector<int> plan_gradients_in_place(const memory_inputs& in,
                                                const std::vector<bool>& materialized) {
  const program_view& p = in.program;
  const graph_view& g = p.nodes;
  const step_fusion& fused = in.fused;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  std::vector<int> written_into(at(g.size()), -1);
  if (!in.options.reuse || !p.is_training() || in.pipelined) return written_into;
  for (int grad = 0; grad < g.size(); ++grad) {
    if (g[grad].kind != op::param_grad) continue;
    const int from = g[grad].inputs[0];
    const std::size_t s = in.steps.producer_step[at(from)];
    if (s == step_index::no_step) continue;
    // The step's node: `from` itself, or the weight product that writes `from`, its bias gradient,
    // or the norm's input gradient that writes `from`, its weight gradient (or that one's bias's).
    const int writer = p.steps[s].node, weight = fused.weight_grad_of[at(writer)];
    const bool by_input_grad = weight >= 0 && (weight == from || fused.bias_grad_of[at(weight)] == from);
    bool in_batch = false;  // or a product batched with the step's, or that one's bias gradient
    for (int j : fused.batched_with[at(writer)])
      in_batch = in_batch || j == from || fused.bias_grad_of[at(j)] == from;
    if (writer != from && fused.bias_grad_of[at(writer)] != from && !by_input_grad && !in_batch) continue;
    const step_kind kind = p.steps[s].kind;
    if (kind != step_kind::compute && kind != step_kind::fused) continue;
    if (in.steps.readers[at(from)].size() != 1 || g[from].region != g[grad].region ||
        g[from].type != g[grad].type || in.layout.of(from).numel() != in.layout.of(grad).numel() ||
        !materialized[at(from)] || per_layer(p, in.steps, in.scattered_grad, from))
      continue;
    written_into[at(from)] = grad;
  }
  return written_into;
}

}  // namespace shardgraph::plan
