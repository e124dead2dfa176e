#pragma once
// memory_report: the bytes one rank's bound program holds, by kind (what bind allocated; the
// trainer's optimizer state comes on top). rank_program::memory() fills it; the bound plan's
// printer (plan/print_bound_plan.hpp) shows it.
#include <cstdint>

namespace shardgraph {

struct memory_report {
  std::int64_t parameters = 0;   // this rank's weight slices, every layer
  std::int64_t kv_cache = 0;     // generation programs: this rank's KV cache blocks, every layer
  // A binding that uses another's parameters (bind(..., share_parameters()), rank.rebind()): the
  // weights and KV cache it reads in memory that binding allocated, and not in the two above, so
  // that the bindings' sums count each byte once.
  std::int64_t shared_parameters = 0;
  std::int64_t shared_kv_cache = 0;
  std::int64_t gradients = 0;    // param_grad values, every layer (training programs); ZeRO-2/3
                                 // buckets: this rank's reduce-scattered chunks instead
  std::int64_t activations = 0;  // every other value; per layer for forward blocks in training
  std::int64_t communication =
      0;  // staging buffers of all_gather, reduce_scatter, all_to_all; gradient buckets
  std::int64_t gathered_parameters = 0;  // ZeRO-3: whole weights held while in use (two layers, and
                                         // the weights outside blocks from forward's start to its end)
  int micro_batches_in_flight = 1;       // pipelines: activation slots the schedule needs at once
  std::int64_t activations_per_micro_batch = 0;  // pipelines: the part of `activations` each slot copies
  std::int64_t arena = 0;  // the part of `activations` that values share by lifetime (memory_options)
  std::int64_t arena_values = 0;  // what the values in the arena would take, each in its own memory
  int gradients_in_place = 0;     // parameter gradients their step writes into the param_grad's memory
};

}  // namespace shardgraph
