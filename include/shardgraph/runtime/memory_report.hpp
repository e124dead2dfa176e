#pragma once
// What bind planned for one rank, as reports: the bytes its program holds, by kind (what bind
// allocated, counted from the buffers themselves; the trainer adds its own), and its gradient
// buckets.
//
//   memory_report m = report_memory(g, storage, memory, zero3, buckets, slots);
//   std::vector<bucket_report> b = report_buckets(buckets.plan());
#include <cstdint>
#include <vector>

#include "shardgraph/plan/gradient_buckets.hpp"
#include "shardgraph/plan/memory_layout.hpp"
#include "shardgraph/plan/memory_report.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/micro_batch_slots.hpp"
#include "shardgraph/runtime/value_storage.hpp"

namespace shardgraph {

// `zero3`: runtime/zero3_gathers.hpp's zero3_parameters; `buckets`: gradient_buckets.hpp's
// bucket_reductions.
template <class Backend, class Zero3, class Buckets>
memory_report report_memory(const graph_view& g, const value_storage<Backend>& storage,
                            const plan::memory_layout& memory, const Zero3& zero3, const Buckets& buckets,
                            const micro_batch_slots<Backend>& slots) {
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  const auto bytes_of = [](const auto& b) { return static_cast<std::int64_t>(b.size_bytes()); };
  memory_report m;
  m.arena = storage.arena_bytes();
  m.arena_values = memory.arena_values_bytes;
  m.activations += m.arena;
  m.gradients_in_place = memory.gradients_in_place;
  for (int i = 0; i < g.size(); ++i) {
    std::int64_t bytes =
        memory.values[at(i)].kind == plan::storage::arena ? 0 : bytes_of(storage.values()[at(i)]);
    for (const auto& b : storage.per_layer(i)) bytes += bytes_of(b);
    for (const auto& b : storage.saved(i)) bytes += bytes_of(b);
    for (const auto& b : storage.staging(i)) m.communication += bytes_of(b);
    if (g[i].kind == op::parameter && zero3) {
      m.parameters += zero3.stored_bytes(i);
      m.gathered_parameters += zero3.gathered_bytes(i);
      if (g[i].region < 0)
        m.gathered_parameters += zero3.plan().gathered(i) * static_cast<std::int64_t>(dtype_size(g[i].type));
    } else if (g[i].kind == op::parameter && storage.borrows_parameters()) {  // another binding's memory
      (g[i].kv_cache ? m.shared_kv_cache : m.shared_parameters) += bytes;
    } else if (g[i].kind == op::parameter) {
      (g[i].kv_cache ? m.kv_cache : m.parameters) += bytes;
    } else if (g[i].kind == op::param_grad) {
      m.gradients += bytes;
    } else {
      m.activations += bytes;
    }
  }
  m.communication += buckets.staging_bytes();
  m.gradients += buckets.chunk_bytes();
  m.communication += slots.inbox_bytes();
  m.activations += slots.slot_bytes();  // each further micro-batch in flight holds its own copy
  m.micro_batches_in_flight = slots.in_flight();
  m.activations_per_micro_batch = slots.bytes_per_slot(storage);
  return m;
}

// A gradient bucket planned at bind.
struct bucket_report {
  std::int64_t bytes = 0;       // what the collective sends: the whole bucket (ZeRO-2, 3: every rank's part)
  int gradients = 0;            // (parameter, layer) gradients packed into it
  bool reduce_scatter = false;  // ZeRO-2, 3: each rank receives its chunk of every gradient
};

// The buckets of `plan`, in the order they are reduced.
inline std::vector<bucket_report> report_buckets(const plan::gradient_bucket_plan& plan) {
  std::vector<bucket_report> r;
  for (const plan::gradient_bucket& b : plan.buckets)
    r.push_back({b.packed_elements() * static_cast<std::int64_t>(dtype_size(b.type)),
                 static_cast<int>(b.members.size()), b.scatter});
  return r;
}

}  // namespace shardgraph
