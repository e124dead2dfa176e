#pragma once
// micro_batch_slots: a pipeline stage's micro-batch slots (plan/micro_batch_banks.hpp). Every value
// but the parameters and their gradients exists once per micro-batch in flight; the active slot's
// values are the rank's running ones (value_storage), the others wait here, and select() swaps them.
// The inbox holds the activations received before their forward runs.
//
//   micro_batch_slots<Backend> slots(plan, stages.banks);
//   slots.allocate(storage, g, allocate);   // at bind, once the running values exist
//   slots.select(k, storage, g);             // micro-batch slot k's values become the running ones
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/plan/micro_batch_banks.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/value_storage.hpp"

namespace shardgraph {

template <compute::ComputeBackend Backend>
class micro_batch_slots {
 public:
  using buffer = typename Backend::buffer;

  micro_batch_slots() = default;
  micro_batch_slots(plan::micro_batch_banks plan, int slots, int inbox)
      : plan_(std::move(plan)), slots_(at(slots)), inbox_(at(inbox)) {}

  bool banked(int i) const { return !plan_.per_node.empty() && plan_.banked(i); }
  const plan::micro_batch_banks& plan() const { return plan_; }  // which values have a copy per slot
  int in_flight() const { return std::max<int>(1, static_cast<int>(slots_.size())); }

  // Slots 1.. get buffers of the sizes of the running values (slot 0's are the running ones to begin
  // with), and the inbox `numel` elements of `type` each. allocate(node, type, numel) -> buffer.
  template <class Allocate>
  void allocate(value_storage<Backend>& running, const graph_view& g, int inbox_node, std::int64_t inbox_numel,
                Allocate&& allocate) {
    for (buffer& b : inbox_) b = allocate(inbox_node, g[inbox_node].type, inbox_numel);
    active_ = 0;
    for (std::size_t k = 0; k < slots_.size(); ++k) {
      slot& s = slots_[k];
      s.values.resize(at(g.size()));
      s.per_layer.resize(at(g.size()));
      s.saved.resize(at(g.size()));
      if (k == 0) continue;
      for (int i = 0; i < g.size(); ++i) {
        if (!banked(i)) continue;
        s.values[at(i)] = allocate(i, g[i].type, running.values()[at(i)].numel());
        for (const buffer& layer : running.per_layer(i))
          s.per_layer[at(i)].push_back(allocate(i, g[i].type, layer.numel()));
        for (const buffer& statistics : running.saved(i))
          s.saved[at(i)].push_back(allocate(i, statistics.type(), statistics.numel()));
      }
    }
  }

  // Makes slot k's values the running ones, the running ones going back to their slot.
  void select(int k, value_storage<Backend>& running, const graph_view& g) {
    if (k == active_) return;
    for (int i = 0; i < g.size(); ++i) {
      if (!banked(i)) continue;
      std::swap(running.values()[at(i)], slots_[at(active_)].values[at(i)]);
      std::swap(running.per_layer(i), slots_[at(active_)].per_layer[at(i)]);
      std::swap(running.saved(i), slots_[at(active_)].saved[at(i)]);
      std::swap(running.values()[at(i)], slots_[at(k)].values[at(i)]);
      std::swap(running.per_layer(i), slots_[at(k)].per_layer[at(i)]);
      std::swap(running.saved(i), slots_[at(k)].saved[at(i)]);
    }
    active_ = k;
  }

  std::vector<buffer>& inbox() { return inbox_; }

  // Bytes the slots hold, and those the inbox holds.
  std::int64_t slot_bytes() const {
    std::int64_t bytes = 0;
    for (const slot& s : slots_) {
      for (const buffer& v : s.values) bytes += static_cast<std::int64_t>(v.size_bytes());
      for (const auto& layers : s.per_layer)
        for (const buffer& v : layers) bytes += static_cast<std::int64_t>(v.size_bytes());
      for (const auto& statistics : s.saved)
        for (const buffer& v : statistics) bytes += static_cast<std::int64_t>(v.size_bytes());
    }
    return bytes;
  }
  std::int64_t inbox_bytes() const {
    std::int64_t bytes = 0;
    for (const buffer& b : inbox_) bytes += static_cast<std::int64_t>(b.size_bytes());
    return bytes;
  }
  // The bytes of one micro-batch's running values: what each further slot copies.
  std::int64_t bytes_per_slot(const value_storage<Backend>& running) const {
    std::int64_t bytes = 0;
    for (int i = 0; i < static_cast<int>(plan_.per_node.size()); ++i) {
      if (!banked(i)) continue;
      bytes += static_cast<std::int64_t>(running.values()[at(i)].size_bytes());
      for (const buffer& v : running.per_layer(i)) bytes += static_cast<std::int64_t>(v.size_bytes());
      for (const buffer& v : running.saved(i)) bytes += static_cast<std::int64_t>(v.size_bytes());
    }
    return bytes;
  }

 private:
  static std::size_t at(int i) { return static_cast<std::size_t>(i); }

  struct slot {
    std::vector<buffer> values;                  // per node (banked ones only)
    std::vector<std::vector<buffer>> per_layer;  // per node: per block layer
    std::vector<std::vector<buffer>> saved;      // per node: statistics saved with it
  };
  plan::micro_batch_banks plan_;  // the values with one copy per micro-batch in flight
  std::vector<slot> slots_;
  std::vector<buffer> inbox_;  // activations received before their forward runs
  int active_ = 0;             // the slot whose values are the running ones
};

}  // namespace shardgraph
