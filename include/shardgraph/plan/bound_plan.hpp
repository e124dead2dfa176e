#pragma once
// bound_plan: what bind decided for one rank, as one read-only view over the plan values the
// executor holds (it copies nothing but the memory totals, and decides nothing).
//
//   auto rank = shardgraph::bind(program, sizes, comm, cpu::backend{}, mesh, weights);
//   const plan::bound_plan p = rank.plan();
//   p.calls.of_step(s);               // step s's calls (plan/call_list.hpp)
//   p.memory.values[i].offset;        // where value i lies in the arena (plan/memory_layout.hpp)
//   p.buckets.buckets[k].members;     // the k-th gradient bucket backward fills
//   print(p, std::cout);              // per call: op, local shapes, buffers, collectives (print_bound_plan.hpp)
//
// The view is valid while the rank_program it came from lives and is not moved.
#include <cstddef>
#include <span>

#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/plan/call_list.hpp"
#include "shardgraph/plan/gradient_buckets.hpp"
#include "shardgraph/plan/memory_layout.hpp"
#include "shardgraph/plan/memory_report.hpp"
#include "shardgraph/plan/micro_batch_banks.hpp"
#include "shardgraph/plan/pipeline_stages.hpp"
#include "shardgraph/plan/step_fusion.hpp"
#include "shardgraph/plan/step_index.hpp"
#include "shardgraph/plan/zero3_gathers.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph::plan {

struct bound_plan {
  program_view compiled;
  const model_sizes& sizes;
  const local_layout& layout;          // every node's local shape and this rank's mesh coordinates
  std::span<const int> axis_sizes;     // per mesh axis: its ranks
  int world_rank = 0;
  const step_index& steps;             // phases and loop steps, producers moved by fusion
  const pipeline_stages& stages;       // this rank's layers and phases (one stage: pipelined() false)
  const micro_batch_banks& banks;      // pipelines: the values with a copy per micro-batch in flight
  const step_fusion& fusion;           // which steps' calls others take over
  const call_list& calls;              // each step's calls (plan/call_list.hpp)
  const memory_layout& memory;         // where every value lives
  const gradient_bucket_plan& buckets;
  const zero3_gathers& zero3;
  std::span<const std::size_t> recomputed_steps;  // forward block steps run again in each backward layer
  bool overlapped = false;             // buckets and ZeRO-3's prefetch run on communication threads
  memory_report totals;                // the bytes bind allocated, by kind (rank_program::memory())
};

}  // namespace shardgraph::plan
