#pragma once
// memory_inputs: what the memory planning passes read (plan/memory_layout.hpp runs them all).
//
//   const plan::memory_inputs in{.program = p, .steps = idx, .layout = layout, .fused = fused,
//                                .options = {}, .scattered_grad = {}, .views = true};
//
// Everything is a value another pass made: the step index (its producer steps as step fusion left
// them: a product batched with an earlier one is produced at that one's step), this rank's local
// shapes, the fused calls, the buckets' reduce-scattered gradients (ZeRO-2, 3), and whether the
// program runs as pipeline stages (micro-batch slots: no value shares memory or is carried).
#include <vector>

#include "shardgraph/plan/step_index.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"
#include "shardgraph/runtime/memory_options.hpp"
#include "shardgraph/plan/step_fusion.hpp"

namespace shardgraph::plan {

struct memory_inputs {
  shardgraph::program_view program;
  const step_index& steps;
  const local_layout& layout;
  const step_fusion& fused;
  const memory_options& options;
  // per node: a param_grad that a bucket reduce-scatters (ZeRO-2, 3); empty: none
  const std::vector<bool>& scattered_grad;
  bool pipelined = false;  // micro-batches' forwards and backwards interleave
  bool views = false;      // backend_traits::views: a value may be a view into shared memory
};

}  // namespace shardgraph::plan
