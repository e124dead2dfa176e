#pragma once
// agree_on_local_inputs: the checks of inputs given as each rank's own slices (io_part::local),
// agreed by every rank before any compute.
//
//   std::vector<std::int64_t> counts = agree_on_local_inputs(g, layout, loss, batches, axis_comms, rank);
//
// Given whole, every rank checks the same tensors and throws the same error by itself, and counts
// the targets of the whole batch (runtime/token_inputs.hpp). Given as slices, each rank sees only
// its own: it checks them (each input present, of its dtype and this rank's local shape; its token
// ids inside the vocabulary) and counts its targets, then one all-reduce per mesh axis, of a few
// numbers, tells every rank how many ranks failed and sums the counts over the ranks holding
// distinct slices (a count's input sharded on the axis: summed; replicated: taken once). A rank
// whose slices are wrong throws its own error; every other rank throws one naming that rank,
// instead of waiting in a collective that rank never joins.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"
#include "shardgraph/runtime/loss_divisors.hpp"
#include "shardgraph/runtime/rank_io.hpp"

namespace shardgraph {

namespace detail {
// Checks this rank's slices of every batch; returns its counted targets (per loss's targets
// input, summed over batches) and, when a check failed, the error (else empty).
inline std::string check_local_inputs(const graph_view& g, const local_layout& layout, const loss_divisors& loss,
                                      std::span<const tensor_map> batches,
                                      std::vector<std::int64_t>& counts) {
  try {
    for (std::size_t k = 0; k < batches.size(); ++k) {
      for (int i = 0; i < g.size(); ++i)
        if (g[i].kind == op::input) given_local_input(g[i], layout.of(i), batches[k]);
      const std::vector<std::int64_t> c = loss.counted_targets(g, batches[k]);
      for (std::size_t j = 0; j < c.size() && j < counts.size(); ++j) counts[j] += c[j];
    }
  } catch (const error& e) {
    return e.what();
  }
  return {};
}
}  // namespace detail

// Returns the counted targets of `batches` (per loss, loss_divisors::counted_targets' order) over
// every rank's slices; every rank must call it. Throws on every rank when any rank's check failed.
template <class Comm>
std::vector<std::int64_t> agree_on_local_inputs(const graph_view& g, const local_layout& layout,
                                                const loss_divisors& loss,
                                                std::span<const tensor_map> batches,
                                                std::span<Comm> axis_comms, int world_rank) {
  const std::vector<int> targets = loss.targets_inputs();
  std::vector<std::int64_t> counts(targets.size(), 0);
  const std::string failure = detail::check_local_inputs(g, layout, loss, batches, counts);
  // [count per loss..., ranks failed, sum over failed ranks of (rank + 1)]; exact in doubles
  std::vector<double> agreed(counts.begin(), counts.end());
  agreed.push_back(failure.empty() ? 0.0 : 1.0);
  agreed.push_back(failure.empty() ? 0.0 : static_cast<double>(world_rank) + 1);
  for (int a = 0; a < static_cast<int>(axis_comms.size()); ++a) {
    for (std::size_t j = 0; j < targets.size(); ++j)
      if (!g[targets[j]].spec[a].is_shard() && layout.coordinate(a) != 0) agreed[j] = 0;  // counted once
    axis_comms[static_cast<std::size_t>(a)].all_reduce(std::span<double>(agreed));
  }
  if (!failure.empty()) throw error(failure);
  const auto failed = static_cast<std::int64_t>(agreed[targets.size()]);
  if (failed > 0) {
    const std::string who = failed == 1
                                ? "rank " + std::to_string(static_cast<std::int64_t>(agreed.back()) - 1)
                                : std::to_string(failed) + " ranks";
    fail("forward: rank " + std::to_string(world_rank),
         who + " found " + (failed == 1 ? "its" : "their") + " slices of the inputs wrong, so no rank runs",
         "see the error " + who +
             " reported; give each rank its own slice of every input "
             "(shardgraph::input_slice gives its offset and shape)");
  }
  for (std::size_t j = 0; j < counts.size(); ++j) counts[j] = static_cast<std::int64_t>(agreed[j]);
  return counts;
}

}  // namespace shardgraph
