#pragma once
// memory_options: how bind() lays out the values of the per-rank program.
//
//   auto rank = shardgraph::bind(program, sizes, comm, backend, mesh, weights, {}, {.outputs = {"loss"}});
//
// With `reuse` (the default) the values whose lifetimes do not overlap share the bytes of one arena
// (plan/memory_layout.hpp): a block's temporaries, the backward's gradients of activations, the head's
// logits and their gradient. Values a step keeps across calls are never shared: parameters, their
// gradients, inputs, the activations the backward reads per layer, and whatever a collective reads
// or writes; an output is a view of the arena value it copies, kept to the step's end.
// `reuse = false` gives every value its own allocation, as a reference for tests and for debugging
// a backend. Backends without view() (compute_backend.hpp) always get separate allocations.
//
// `outputs` names the outputs forward() returns (empty: all of them). The others are neither copied
// nor kept, so their bytes are reused: a training step that reads only the loss (the trainer's)
// frees the logits, and the cross-entropy's gradient is then written over them in place, as llm.c
// and fused cross-entropy kernels do. Values that only those outputs read are not computed either:
// a sharded model's logits are then not gathered over dp and tp (a B x T x vocab all_gather).
//
// `fusion` is the fused kinds (compute/fused_kinds.hpp) the plan may make: each a call standing for
// several steps, run by the backend where its traits declare the kind, else lowered into its parts
// by the core. Every kind by default; `{}` makes every step a call of its own, the reference a fused
// plan is tested against.
//
// `available_bytes` is what bind may allocate on this rank's device; bind fails, saying how much the
// plan needs, when its values need more (memory_budget.hpp). Unset: the backend's free_bytes() when
// bind starts (the cpu backend: MemAvailable; cuda: the GPU's free memory), no limit without one.
// Ranks sharing a device (thread ranks on the cpu backend) each see the whole of it: give each its
// share here to check them together.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "shardgraph/compute/fused_kinds.hpp"

namespace shardgraph {

struct memory_options {
  bool reuse = true;
  std::vector<std::string> outputs{};
  std::optional<std::size_t> available_bytes{};
  compute::fused_set fusion = compute::fused_set::all();
};

}  // namespace shardgraph
