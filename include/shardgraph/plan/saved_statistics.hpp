#pragma once
// saved_statistics: the row statistics a forward call saves for its backward (fused::attention_saved,
// fused::cross_entropy_saved), as buffers the plan sizes and the executor allocates with the value
// they go with, so that they live, are kept per layer and per micro-batch exactly as that value is.
//
//   for (const plan::saved_statistics& s : plan::plan_saved_statistics(program, layout, sizes, fused))
//     ...   // s.value: the attention's result or the cross-entropy's logits; s.numel of s.type
//
// An attention saves each row's log-sum-exp of its scaled scores, (batch, heads, seq) f32, with its
// result; a cross-entropy each row's log-sum-exp of its logits, (rows) f32 (f64 for f64 logits),
// with the logits. kernel_call::saved (compute/compute_backend.hpp) is the buffer.
#include <cstdint>
#include <vector>

#include "shardgraph/core/dtype.hpp"
#include "shardgraph/plan/kernel_dims.hpp"
#include "shardgraph/plan/step_fusion.hpp"

namespace shardgraph::plan {

struct saved_statistics {
  int value = -1;  // the value they live with (bound_call::saved)
  dtype type = dtype::f32;
  std::int64_t numel = 0;
  friend bool operator==(const saved_statistics&, const saved_statistics&) = default;
};

// One entry per forward call that saves statistics (step_fusion::output_kept), in node order.
inline std::vector<saved_statistics> plan_saved_statistics(const program_view& p, const local_layout& layout,
                                                           const model_sizes& sizes, const step_fusion& fused) {
  std::vector<saved_statistics> saved;
  const graph_view& g = p.nodes;
  for (int i = 0; i < g.size(); ++i) {
    if (!fused.output_kept[static_cast<std::size_t>(i)]) continue;
    const kernel_dim_array d = kernel_dims(p, layout, sizes, i);
    if (g[i].kind == op::attention)
      saved.push_back({.value = i, .type = dtype::f32, .numel = d[0] * d[1] * d[3]});  // batch, heads, seq
    else if (g[i].kind == op::cross_entropy)
      saved.push_back({.value = g[i].inputs[0],
                       .type = g[g[i].inputs[0]].type == dtype::f64 ? dtype::f64 : dtype::f32,
                       .numel = d[0]});  // rows
  }
  return saved;
}

}  // namespace shardgraph::plan
