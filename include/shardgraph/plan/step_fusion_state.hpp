#pragma once
// What the step fusion passes (plan/step_fusion_*.hpp) share while they plan, in the order
// plan_step_fusion runs them: the inputs, the backend's traits, the plan so far, and the step at
// which each value is written so far (a pass that hands a value to another call moves it, and the
// passes after it read the moved step).
#include <cstddef>
#include <vector>

#include "shardgraph/plan/backend_traits.hpp"
#include "shardgraph/plan/step_fusion.hpp"

namespace shardgraph::plan::detail {

inline std::size_t at(int i) { return static_cast<std::size_t>(i); }

struct fusion_state {
  const step_fusion_inputs& in;
  const backend_traits& traits;
  step_fusion plan;
  std::vector<std::size_t> written_at;  // per node: the step whose call writes it (no_step: none)

  const graph_view& nodes() const { return in.program.nodes; }
  bool introduces(compute::fused kind) const { return traits.fused.has(kind); }
  const auto& steps() const { return in.program.steps; }
  const std::vector<int>& readers(int i) const { return in.steps.readers[at(i)]; }
  std::size_t step_of(int i) const { return written_at[at(i)]; }

  // Whether a compute step of its own writes node i (not a fused chain, a copy or a collective,
  // nor another node's call).
  bool computed_alone(int i) const {
    const std::size_t s = step_of(i);
    return s != step_index::no_step && steps()[s].kind == step_kind::compute && steps()[s].node == i;
  }
  // Whether i's only reader is r.
  bool only_reader(int i, int r) const { return readers(i).size() == 1 && readers(i)[0] == r; }

  // Node `taken`'s value is written by `by`'s call, at `step` (unchanged: no_step).
  void take_over(int taken, int by, std::size_t step = step_index::no_step) {
    plan.taken_over_by[at(taken)] = by;
    if (step != step_index::no_step) written_at[at(taken)] = step;
  }
};

}  // namespace shardgraph::plan::detail
