#pragma once
// plan_overlapped_axes: the mesh axes whose collectives may run on a communication thread while the
// rank computes: those with a gradient bucket to reduce, and the zero axis when ZeRO-3 gathers
// parameters over more than one rank.
//
//   buckets on axis 0 (dp), ZeRO-3 over dp (2 ranks), axes (dp, tp):  {true, false}
#include <cstddef>
#include <vector>

#include "shardgraph/plan/gradient_buckets.hpp"
#include "shardgraph/plan/zero3_gathers.hpp"

namespace shardgraph::plan {

// Per mesh axis (of `axes`): whether it has a bucket or ZeRO-3's gathers.
inline std::vector<bool> plan_overlapped_axes(const gradient_bucket_plan& buckets, const zero3_gathers& zero3,
                                              int axes) {
  std::vector<bool> used(static_cast<std::size_t>(axes), false);
  for (const gradient_bucket& b : buckets.buckets) used[static_cast<std::size_t>(b.axis)] = true;
  if (zero3.on() && zero3.parts > 1) used[static_cast<std::size_t>(zero3.axis)] = true;
  return used;
}

}  // namespace shardgraph::plan
