#pragma once
// plan_loss_entries: which count of counted targets each loss divides by.
//
// check_token_inputs (runtime/token_inputs.hpp) counts the targets that count, one entry per
// cross_entropy reader of an input of targets, in the order of its `tokens`. A mean cross_entropy,
// and its gradient, divide by the entry of the input their targets are a copy of and whose ignore
// index they share; a loss whose targets come from no input has no entry (-1).
//
//   tokens: [ids -> embedding, targets -> cross_entropy 'loss' (ignore -100)]
//   plan_loss_entries(g, tokens)[loss] == 0, [loss_grad] == 0, every other node -1
#include <cstddef>
#include <vector>

#include "shardgraph/ir/graph.hpp"
#include "shardgraph/runtime/token_inputs.hpp"

namespace shardgraph::plan {

// Per node: the index of its targets' count among the targets entries of `tokens` (-1: none).
inline std::vector<int> plan_loss_entries(const graph_view& g, const std::vector<token_input>& tokens) {
  std::vector<int> entry(static_cast<std::size_t>(g.size()), -1);
  int k = 0;
  for (const token_input& t : tokens) {
    if (!t.targets) continue;
    for (int i = 0; i < g.size(); ++i)
      if ((g[i].kind == op::cross_entropy || g[i].kind == op::cross_entropy_grad) &&
          shardgraph::detail::source_input(g, g[i].inputs[1]) == t.input &&
          g[i].ignore_index == t.ignore_index)
        entry[static_cast<std::size_t>(i)] = k;
    ++k;
  }
  return entry;
}

}  // namespace shardgraph::plan
