#pragma once
// simulate: when each compute action of a schedule runs, under the textbook cost model, and what the
// pipeline bubble costs. A forward takes 1 time unit and a backward 2, per rank's share of the model
// (with v chunks per rank, a chunk's forward takes 1/v and its backward 2/v); communication is free, so
// a value can be used the moment it is computed. Each rank runs its compute actions in list order.
//
// Under this model GPipe and 1F1B idle for the same fraction, the bubble (p-1)/(m+p-1) for p ranks and
// m micro-batches; interleaving v chunks per rank shrinks it to (p-1)/(v m + p-1):
//   simulate(make_schedule(schedule_kind::one_f_one_b, 4, 8)).bubble_fraction() == 3.0 / 11   // 0.273
#include <algorithm>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/pipeline/schedule.hpp"

namespace shardgraph::pipeline {

struct timed_action {
  action what;
  double start = 0, end = 0;  // in time units
};

struct timeline {
  std::vector<std::vector<timed_action>> per_rank;  // each rank's compute actions, in the order they run
  double makespan = 0;                              // when the last one ends

  double busy_time() const {
    double busy = 0;
    for (const auto& rank : per_rank)
      for (const timed_action& t : rank) busy += t.end - t.start;
    return busy;
  }
  // Idle time over all time: idle / (ranks * makespan).
  double bubble_fraction() const {
    const double all = static_cast<double>(per_rank.size()) * makespan;
    return all > 0 ? (all - busy_time()) / all : 0.0;
  }
};

// The timeline of `s` (verified first: throws shardgraph::error as verify() does).
inline timeline simulate(const schedule& s) {
  verify(s);
  const detail::compute_ticks ticks = detail::time_compute(s);
  const double tick = 1.0 / s.virtual_stages;
  timeline t;
  t.per_rank.resize(s.per_rank.size());
  std::int64_t last = 0;
  for (std::size_t r = 0; r < s.per_rank.size(); ++r) {
    std::size_t i = 0;
    for (const action& a : s.per_rank[r]) {
      if (!is_compute(a.kind)) continue;
      t.per_rank[r].push_back(
          {a, static_cast<double>(ticks.start[r][i]) * tick, static_cast<double>(ticks.end[r][i]) * tick});
      last = std::max(last, ticks.end[r][i]);
      ++i;
    }
  }
  t.makespan = static_cast<double>(last) * tick;
  return t;
}

// The bubble fraction that theory gives for `s`: (p-1)/(v m + p-1), v = 1 for GPipe and 1F1B.
inline double textbook_bubble_fraction(const schedule& s) {
  const double p = s.ranks, m = s.micro_batches, v = s.virtual_stages;
  return (p - 1) / (v * m + p - 1);
}

// The most micro-batches whose forward ran on `rank` and whose backward has not yet, counting each
// chunk's separately (the activations the rank must keep): m for GPipe, min(p, m) on rank 0 for 1F1B.
inline int max_in_flight(const schedule& s, int rank) {
  if (rank < 0 || rank >= static_cast<int>(s.per_rank.size()))
    fail("pipeline::max_in_flight(rank " + std::to_string(rank) + ")",
         "the schedule has " + detail::plural(static_cast<long long>(s.per_rank.size()), "rank", "ranks"),
         "ask for a rank from 0 to " + std::to_string(static_cast<int>(s.per_rank.size()) - 1));
  int alive = 0, most = 0;
  for (const action& a : s.per_rank[static_cast<std::size_t>(rank)]) {
    if (a.kind == action_kind::forward) most = std::max(most, ++alive);
    if (a.kind == action_kind::backward) --alive;
  }
  return most;
}

}  // namespace shardgraph::pipeline
