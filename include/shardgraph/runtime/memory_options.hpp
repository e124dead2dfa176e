#pragma once
// memory_options: how bind() lays out the values of the per-rank program.
//
//   auto rank = shardgraph::bind(program, sizes, comm, backend, mesh, weights, {}, {.reuse = false});
//
// With `reuse` (the default) the values whose lifetimes do not overlap share the bytes of one arena
// (memory_plan.hpp): a block's temporaries, the backward's gradients of activations, the head's
// logits and their gradient. Values a step keeps across calls are never shared: parameters, their
// gradients, inputs, outputs, the activations the backward reads per layer, and whatever a
// collective reads or writes. `reuse = false` gives every value its own allocation, as a reference
// for tests and for debugging a backend. Backends without view() (compute_backend.hpp) always get
// separate allocations.
namespace shardgraph {

struct memory_options {
  bool reuse = true;
};

}  // namespace shardgraph
