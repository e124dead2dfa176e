#pragma once
// value_storage: the buffers of one rank's values, allocated as the memory plan places them
// (plan/memory_layout.hpp), and every allocation bind makes counted against the device's memory
// (runtime/memory_budget.hpp).
//
//   value_storage<Backend> s(memory_budget_for(backend, options.available_bytes));
//   s.allocate_values(backend, {.nodes = g, .layout = layout, ...}, store_chunks);   // per node, in order
//   s.allocate_layer_blocks(backend, memory, g, layers, stages);
//   s.allocate_arena(backend, memory, g, layout);
//   s.allocate_saved(backend, memory, g, saved, layers, stages);   // statistics saved with values
//   s.check(rank);                                     // throws when the plan did not fit
//   buffer& v = s.at(place.node, place.layer);         // where memory_layout::place_of points
//
// Per node it holds one value, or one per layer of its block (then the one value is empty), and the
// staging buffers of an all_gather, reduce_scatter (one) or all_to_all (two: sent, received). A
// value in the arena or a layer block is a view into that memory, made once the memory exists.
// Given a parameter_memory (runtime/shared_parameters.hpp), every parameter's value is a view into
// it: into allocations this storage makes there, or, when it borrows them, into those of the
// binding it shares the parameters of (then it allocates none for them).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/plan/backend_traits.hpp"
#include "shardgraph/plan/memory_layout.hpp"
#include "shardgraph/plan/pipeline_stages.hpp"
#include "shardgraph/plan/saved_statistics.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"
#include "shardgraph/runtime/memory_budget.hpp"
#include "shardgraph/runtime/shared_parameters.hpp"

namespace shardgraph {

// What the allocation of the values reads: the program, this rank's local sizes, where the memory
// plan puts each value, and which layers and values this pipeline stage holds.
struct value_allocation {
  graph_view nodes;
  const local_layout& layout;
  const plan::memory_layout& memory;
  const plan::pipeline_stages& stages;
  std::span<const int> axis_sizes;  // per mesh axis: its ranks (an all_gather's staging is that many inputs)
  std::int64_t layers = 1;          // block layers (a per-layer value's count)
  bool sharded_parameters = false;  // ZeRO-3: a parameter's value is empty, its chunks stored apart
};

template <compute::ComputeBackend Backend>
class value_storage {
 public:
  using buffer = typename Backend::buffer;

  value_storage() = default;
  explicit value_storage(memory_budget budget) : budget_(std::move(budget)) {}
  // Before allocate_values: the parameters go into `memory` (null: each in its own buffer, as a
  // backend without views needs); `borrowed`: another binding has allocated and filled them there.
  value_storage(memory_budget budget, std::shared_ptr<parameter_memory<Backend>> memory, bool borrowed)
      : budget_(std::move(budget)), parameters_(std::move(memory)), borrowed_(borrowed) {}

  // Every allocation bind makes: counted against the device's memory, and made only while the plan
  // fits; an empty buffer stands in once it does not (check() then fails with the whole plan's bytes).
  // A backend that cannot give it (a GPU out of memory) is reported with `what`, before the first step.
  buffer allocate(Backend& backend, const std::string& what, dtype type, std::int64_t numel) {
    const std::size_t bytes = checked_bytes(numel, dtype_size(type), "bind: " + what);
    if (!budget_.admit(bytes, what)) return backend.allocate(type, 0);
    try {
      return backend.allocate(type, numel);
    } catch (const error& e) {
      fail(
          "bind: " + what, std::string(e.what()).substr(std::string("shardgraph: ").size()),
          "bind fails before any step runs; memory() of a smaller configuration shows what each value takes");
    }
  }
  // Memory for node n's value (or a part of it): errors name the value.
  buffer allocate_for(Backend& backend, const node& n, dtype type, std::int64_t numel) {
    return allocate(backend,
                    "value '" + std::string(n.name.view()) + "' (" + std::string(op_name(n)) + ", " +
                        std::to_string(numel) + " " + std::string(dtype_name(type)) + " elements)",
                    type, numel);
  }

  // Every node's value, per-layer values and staging, in node order. Under ZeRO-3 a parameter's
  // value is empty (gathered when in use) and store_chunks(i) allocates the chunks it stores.
  template <class StoreChunks>
  void allocate_values(Backend& backend, const value_allocation& in, StoreChunks&& store_chunks) {
    const graph_view& g = in.nodes;
    values_.reserve(at(g.size()));
    staging_.resize(at(g.size()));
    saved_.resize(at(g.size()));
    per_layer_.resize(at(g.size()));
    for (int i = 0; i < g.size(); ++i) {
      if (in.sharded_parameters && g[i].kind == op::parameter) {
        values_.push_back(allocate_for(backend, g[i], g[i].type, 0));
        store_chunks(i);
        continue;
      }
      if (parameters_ && g[i].kind == op::parameter)
        allocate_parameter(backend, in, i);
      else
        allocate_value(backend, in, i);
    }
  }

  // One allocation per layer for each layer block, each member a view at its place in it.
  void allocate_layer_blocks(Backend& backend, const plan::memory_layout& memory, const graph_view& g,
                             std::int64_t layers, const plan::pipeline_stages& stages) {
    if constexpr (plan::traits_of<Backend>().views) {
      for (const plan::layer_block& group : memory.layer_blocks)
        for (std::int64_t l = 0; l < layers; ++l) {
          if (!stages.holds_layer(l) || group.numel == 0) continue;
          if (parameters_ && holds_parameters(group, g)) {
            place_parameter_block(backend, group, g, l);
            continue;
          }
          buffer& block = layer_block_memory_.emplace_back(
              allocate_for(backend, g[group.members[0]], group.type, group.block_numel));
          if (budget_.exceeded()) continue;  // an empty block: bind fails at check()
          for (std::size_t m = 0; m < group.members.size(); ++m)
            per_layer_[at(group.members[m])][at(l)] =
                backend.view(block, m * group.stride, group.type, group.numel);
        }
    }
  }

  // The arena, and every value placed in it (and each output of one) a view into it.
  void allocate_arena(Backend& backend, const plan::memory_layout& memory, const graph_view& g,
                      const local_layout& layout) {
    if constexpr (plan::traits_of<Backend>().views) {
      if (memory.arena_bytes == 0) return;
      const std::string values = std::to_string(memory.arena_shared) + " values that share it by lifetime";
      if (!budget_.admit(memory.arena_bytes, "the activation arena (" + values + ")"))
        return;  // bind fails at check()
      try {
        arena_ = backend.allocate(dtype::f32, static_cast<std::int64_t>((memory.arena_bytes + 3) / 4));
      } catch (const error& e) {
        fail("bind: the activation arena (" + std::to_string(memory.arena_bytes >> 20) + " MiB for " +
                 values + ")",
             std::string(e.what()).substr(std::string("shardgraph: ").size()),
             "use more ranks (tp, pp, ZeRO-3), a smaller batch or recomputation; memory() of a smaller "
             "configuration shows what each kind of value takes");
      }
      for (int i = 0; i < g.size(); ++i)
        if (memory.values[at(i)].kind == plan::storage::arena)
          values_[at(i)] = backend.view(arena_, memory.values[at(i)].offset, g[i].type, layout.of(i).numel());
    }
  }

  // The statistics each saving forward call writes (plan/saved_statistics.hpp), with the memory that
  // holds its value in each layer (memory_layout::place_of): one per layer where that memory is per
  // layer, else one.
  void allocate_saved(Backend& backend, const plan::memory_layout& memory, const graph_view& g,
                      const std::vector<plan::saved_statistics>& saved, std::int64_t layers,
                      const plan::pipeline_stages& stages) {
    saved_.resize(at(g.size()));
    for (const plan::saved_statistics& s : saved)
      for (std::int64_t l = 0; l < layers; ++l) {
        const plan::value_place place = memory.place_of(s.value, l);
        const bool layered = !per_layer_[at(place.node)].empty();
        std::vector<buffer>& held = saved_[at(place.node)];
        const std::size_t slot = layered ? at(place.layer) : 0;
        if (held.size() <= slot) held.resize(layered ? at(layers) : 1);
        if (held[slot].numel() != 0 || (layered && !stages.holds_layer(place.layer))) continue;
        const std::string what = "statistics saved with '" + std::string(g[s.value].name.view()) + "'";
        held[slot] = allocate(backend, what, s.type, s.numel);
      }
  }

  // After the last allocation: the error saying how much the plan needs, if it does not fit.
  void check(int rank) const { budget_.check(rank); }

  // Node i's buffer in `layer`, where the memory plan has already resolved i to the node that owns
  // the memory (memory_layout::place_of): its layer's value when it is kept per layer, else its one.
  buffer& at(int i, std::int64_t layer) {
    std::vector<buffer>& layered = per_layer_[at(i)];
    if (!layered.empty()) return layered[at(layer)];
    return values_[at(i)];
  }
  std::vector<buffer>& values() { return values_; }  // per node (empty: per layer, or elsewhere)
  const std::vector<buffer>& values() const { return values_; }
  std::vector<buffer>& per_layer(int i) { return per_layer_[at(i)]; }
  const std::vector<buffer>& per_layer(int i) const { return per_layer_[at(i)]; }
  std::vector<buffer>& staging(int i) { return staging_[at(i)]; }
  // The statistics saved with node i's memory (empty: none; one, or one per layer).
  std::vector<buffer>& saved(int i) { return saved_[at(i)]; }
  const std::vector<buffer>& saved(int i) const { return saved_[at(i)]; }
  // Those of node i's memory in `layer` (a place memory_layout::place_of resolved).
  buffer& saved_at(int i, std::int64_t layer) {
    std::vector<buffer>& held = saved_[at(i)];
    return held.size() > 1 ? held[at(layer)] : held.at(0);
  }
  const std::vector<buffer>& staging(int i) const { return staging_[at(i)]; }
  std::int64_t arena_bytes() const { return static_cast<std::int64_t>(arena_.size_bytes()); }
  // The memory the parameters are views into (null: they own their buffers), and whether another
  // binding allocated it.
  const std::shared_ptr<parameter_memory<Backend>>& parameters() const { return parameters_; }
  bool borrows_parameters() const { return borrowed_; }

 private:
  static std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

  // Node i's own value (empty where it lives per layer, in the arena or a layer block, is a weight
  // of another stage, or is never run here), its per-layer values and its staging.
  void allocate_value(Backend& backend, const value_allocation& in, int i) {
    const node& n = in.nodes[i];
    const std::int64_t numel = in.layout.of(i).numel();
    const plan::value_memory& memory = in.memory.values[at(i)];
    const bool layered = memory.per_layer;
    const bool unheld_weight = n.kind == op::parameter && n.region < 0 && !in.stages.holds(i, 0);
    const bool never_run = !in.stages.needed_here(i);  // another pipeline stage's phase computes and reads it
    const bool unused = memory.kind != plan::storage::own;  // arena, layer block: views made later
    values_.push_back(
        allocate_for(backend, n, n.type, layered || unheld_weight || never_run || unused ? 0 : numel));
    if (layered) {
      const bool own = memory.kind != plan::storage::layer_block;  // else a view made later
      for (std::int64_t l = 0; l < in.layers; ++l)
        per_layer_[at(i)].push_back(
            allocate_for(backend, n, n.type, own && in.stages.holds_layer(l) ? numel : 0));
    }
    if (n.kind == op::all_gather || n.kind == op::reduce_scatter || n.kind == op::all_to_all) {
      const std::int64_t input = in.layout.of(n.inputs[0]).numel();
      const std::int64_t staged = never_run || in.memory.unread[at(i)] ? 0
                                  : n.kind == op::all_gather           ? input * in.axis_sizes[at(n.axis)]
                                                                       : input;
      staging_[at(i)].push_back(allocate_for(backend, n, n.type, staged));
      if (n.kind == op::all_to_all) staging_[at(i)].push_back(allocate_for(backend, n, n.type, staged));
    }
  }

  // A parameter's one value and its per-layer values, as allocate_value makes them, each a view
  // into the parameter memory (those in layer blocks are placed by place_parameter_block).
  void allocate_parameter(Backend& backend, const value_allocation& in, int i) {
    const node& n = in.nodes[i];
    const std::int64_t numel = in.layout.of(i).numel();
    const plan::value_memory& memory = in.memory.values[at(i)];
    const bool unheld = (n.region < 0 && !in.stages.holds(i, 0)) || !in.stages.needed_here(i);
    if (!memory.per_layer) {
      const bool own = !unheld && memory.kind == plan::storage::own;
      values_.push_back(own ? parameter_view(backend, n, i, -1, numel) : allocate_for(backend, n, n.type, 0));
      return;
    }
    values_.push_back(allocate_for(backend, n, n.type, 0));
    for (std::int64_t l = 0; l < in.layers; ++l) {
      const bool own = memory.kind != plan::storage::layer_block && in.stages.holds_layer(l);
      per_layer_[at(i)].push_back(own ? parameter_view(backend, n, i, l, numel)
                                      : allocate_for(backend, n, n.type, 0));
    }
  }

  // Node i's value in `layer` (-1: its one value): allocated in the parameter memory, or found
  // there when borrowed.
  buffer parameter_view(Backend& backend, const node& n, int i, std::int64_t layer, std::int64_t numel) {
    if constexpr (!plan::traits_of<Backend>().views) {
      fail("bind: parameter '" + std::string(n.name.view()) + "'",
           "this backend has no view(), which shared parameters are",
           "bind each binding with the weights on this backend");
    } else {
      return shared_parameter_view(backend, n, i, layer, numel);
    }
  }
  buffer shared_parameter_view(Backend& backend, const node& n, int i, std::int64_t layer,
                               std::int64_t numel) {
    if (!borrowed_) {
      buffer memory = allocate_for(backend, n, n.type, numel);
      if (memory.numel() != numel) return memory;  // over the budget: check() fails
      parameters_->allocations.push_back(std::move(memory));
      parameters_->record(i, layer, 0, numel);
    }
    const auto* place = parameters_->find(i, layer);
    if (place == nullptr || place->numel != numel) fail_misplaced(n);
    return backend.view(parameters_->allocations[place->allocation], place->offset, n.type, numel);
  }

  static bool holds_parameters(const plan::layer_block& group, const graph_view& g) {
    int parameters = 0;
    for (int m : group.members) parameters += g[m].kind == op::parameter;
    if (parameters != 0 && parameters != static_cast<int>(group.members.size()))
      fail(
          "bind: parameter '" + std::string(g[group.members[0]].name.view()) + "'",
          "a layer block of batched operands holds parameters and other values together, which parameters in "
          "a memory of their own cannot be",
          "this is a bug in the memory plan's layer blocks; please report it");
    return parameters != 0;
  }

  // A layer block of parameters in `layer`: allocated in the parameter memory (or found there when
  // borrowed), each member a view at its stride, as this binding's batched calls read them.
  void place_parameter_block(Backend& backend, const plan::layer_block& group, const graph_view& g,
                             std::int64_t layer) {
    const int first = group.members[0];
    if (!borrowed_) {
      buffer block = allocate_for(backend, g[first], group.type, group.block_numel);
      if (budget_.exceeded()) return;  // check() fails
      parameters_->allocations.push_back(std::move(block));
      for (std::size_t m = 0; m < group.members.size(); ++m)
        parameters_->record(group.members[m], layer, m * group.stride, group.numel);
    }
    const auto* base = parameters_->find(first, layer);
    for (std::size_t m = 0; m < group.members.size(); ++m) {
      const auto* place = parameters_->find(group.members[m], layer);
      if (base == nullptr || place == nullptr || place->allocation != base->allocation ||
          place->offset != m * group.stride || place->numel != group.numel)
        fail_misplaced(g[group.members[m]]);
      per_layer_[at(group.members[m])][at(layer)] =
          backend.view(parameters_->allocations[place->allocation], place->offset, group.type, group.numel);
    }
  }

  [[noreturn]] static void fail_misplaced(const node& n) {
    fail("bind: shared parameters",
         "parameter '" + std::string(n.name.view()) +
             "' lies elsewhere in the shared memory than this binding's memory plan puts it",
         "bind this one with the weights; this is a bug in the memory plan, please report it");
  }

  std::vector<buffer> values_;                  // per node
  std::vector<std::vector<buffer>> per_layer_;  // per node: per block layer (empty: one value)
  std::vector<std::vector<buffer>> staging_;    // per node: a collective's staging buffers
  std::vector<std::vector<buffer>> saved_;      // per node: statistics saved with its memory
  buffer arena_;                                // the values that share memory by lifetime
  std::deque<buffer> layer_block_memory_;       // the layer blocks, one per group and layer
  memory_budget budget_;                        // what bind has allocated, against what the device has
  std::shared_ptr<parameter_memory<Backend>> parameters_;  // the parameters' memory (null: in values_)
  bool borrowed_ = false;                                  // another binding allocated parameters_
};

}  // namespace shardgraph
