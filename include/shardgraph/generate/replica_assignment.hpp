#pragma once
// assign_to_replicas: which data-parallel replica serves each request. Every replica (a tp x pp
// group with its own scheduler and cache) must know its requests without asking the others, so
// the rule is a pure function of the requests, computed alike on every rank:
//
//   requests in order of submission; each goes to the replica with the fewest predicted tokens
//   so far (the lowest replica index on a tie), and adds its own predicted tokens there:
//   predicted = prompt tokens + max_new_tokens, at most the model's positions.
//
//   assign_to_replicas({10, 40, 10, 10}, 2)  ->  {0, 1, 0, 0}     (10 | 40, then 20 | 40, 30 | 40)
//
// A request samples with its own seed, so it gives the same tokens on whichever replica serves it.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"

namespace shardgraph::generate {

// The replica of each request. predicted_tokens: one per request, >= 0.
inline std::vector<int> assign_to_replicas(std::span<const std::int64_t> predicted_tokens, int replicas) {
  if (replicas < 1)
    fail("assign_to_replicas", std::to_string(replicas) + " replicas",
         "give the mesh's dp size (at least 1)");
  std::vector<std::int64_t> load(static_cast<std::size_t>(replicas), 0);
  std::vector<int> replica_of;
  replica_of.reserve(predicted_tokens.size());
  for (const std::int64_t tokens : predicted_tokens) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of the least loaded
    *least += tokens;
    replica_of.push_back(static_cast<int>(least - load.begin()));
  }
  return replica_of;
}

}  // namespace shardgraph::generate
