#pragma once
// memory_layout: where every value of a rank's program lives, as one value bind computes and the
// executor allocates from (it decides nothing about memory itself).
//
//   const plan::memory_layout m = plan::plan_memory(in);   // in: plan/memory_inputs.hpp
//   m.values[i].kind;        // own, arena, layer_block, elsewhere or none
//   m.values[i].offset;      // arena, layer_block: bytes from the start
//   m.arena_bytes;           // the arena's size
//   m.place_of(i, layer);    // whose memory holds value i in layer `layer`
//
// The passes, each in its own file: materialized (which values some step writes, which none needs),
// gradients_in_place (a gradient's step writes its param_grad), carried_values (a block's result
// written where its next layer reads its input, its input where its first layer does),
// batch_operands (batched products' operands at equal strides; the per-layer blocks), arena (which
// values share it, their lifetimes, their offsets; memory_plan.hpp places them).
//
// A value kept per layer (plan/per_layer.hpp) has memory of its own for each layer, or a view into
// each layer's block of its group; any other value has memory of its own, a view into the arena,
// lives in another value's memory (a param_grad's, a split or merge of heads' buffer, a block's
// input or carry), or has none (no step writes it).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "shardgraph/plan/arena.hpp"
#include "shardgraph/plan/batch_operands.hpp"
#include "shardgraph/plan/carried_values.hpp"
#include "shardgraph/plan/gradients_in_place.hpp"
#include "shardgraph/plan/materialized.hpp"
#include "shardgraph/plan/memory_inputs.hpp"
#include "shardgraph/plan/per_layer.hpp"

namespace shardgraph::plan {

enum class storage {
  own,          // memory of its own (per layer: one allocation per layer)
  arena,        // a view at `offset` into the arena
  layer_block,  // per layer: a view at `offset` into that layer's block of group `group`
  elsewhere,    // in another value's memory (memory_layout::place_of says whose)
  none,         // no memory: no step writes it
};

struct value_memory {
  storage kind = storage::own;
  bool per_layer = false;        // one value per layer of its block
  std::size_t offset = 0;        // arena, layer_block: bytes from the start
  int group = -1;                // layer_block: its group in memory_layout::layer_blocks (of two: the later)
  int held_in = -1;              // the value whose memory holds it: a split or merge of heads' buffer,
                                 // its param_grad (written_into), or the block whose input it is
  std::int64_t held_layer = -1;  // held_in's layer that holds it (-1: the running layer's)
  int written_into = -1;         // the param_grad its step writes (-1: none)
  int carried_into = -1;         // a block's result: the block whose next layer's input it is
  int carried_out = -1;          // a carried result: the loop value its last layer writes
  int carry_partner = -1;        // an alternating block: the result its input alternates with
  bool reverse = false;          // a block: runs from its last layer down
};

// Node `node`'s own memory, of layer `layer` where it has one per layer.
struct value_place {
  int node = -1;
  std::int64_t layer = 0;
};

struct memory_layout {
  std::vector<value_memory> values;  // per node
  std::vector<bool> unread;          // per node: only outputs left out read it (its step does not run)
  std::vector<layer_block> layer_blocks;
  std::size_t arena_bytes = 0;
  std::size_t arena_shared = 0;  // values that share the arena by lifetime (outputs viewing them aside)
  std::int64_t arena_values_bytes = 0;  // what those values would take apart
  std::int64_t layers = 1;
  int gradients_in_place = 0;

  // Whose memory holds value i while layer `layer` runs. A carried result is the next layer's
  // input (the last layer's: the loop's value); an alternating block's input is its own memory at
  // its first layer (the last, backward) and every second one after, the result's at the others.
  value_place place_of(int i, std::int64_t layer) const {
    for (;;) {
      const value_memory& m = values[static_cast<std::size_t>(i)];
      if (m.held_in >= 0) {
        if (m.held_layer >= 0) layer = m.held_layer;
        i = m.held_in;
        continue;
      }
      if (const int block = m.carried_into; block >= 0) {
        const value_memory& b = values[static_cast<std::size_t>(block)];
        if (m.carried_out >= 0 && layer == (b.reverse ? 0 : layers - 1)) {
          i = m.carried_out;
          continue;
        }
        if (b.carry_partner >= 0) return alternating(block, b.reverse ? layer - 1 : layer + 1);
        if (layer + 1 < layers) return {block, layer + 1};
      }
      if (m.carry_partner >= 0) return alternating(i, layer);
      return {i, layer};
    }
  }

 private:
  value_place alternating(int block, std::int64_t layer) const {
    const value_memory& b = values[static_cast<std::size_t>(block)];
    const std::int64_t run = b.reverse ? layers - 1 - layer : layer;
    return {run % 2 == 0 ? block : b.carry_partner, layer};
  }
};

namespace detail {

// Every node's storage from the passes' results.
inline std::vector<value_memory> value_memories(const memory_inputs& in, const materialized_values& m,
                                                const std::vector<int>& written_into, const carried_values& c,
                                                const std::vector<layer_block>& blocks,
                                                const arena_layout& arena, std::int64_t layers) {
  const graph_view& g = in.program.nodes;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  std::vector<value_memory> values(at(g.size()));
  for (int i = 0; i < g.size(); ++i) {
    value_memory& v = values[at(i)];
    v.per_layer = per_layer(in.program, in.steps, in.scattered_grad, i);
    v.written_into = written_into[at(i)];
    v.carried_into = c.carried_into[at(i)];
    v.carried_out = c.carried_out[at(i)];
    v.carry_partner = c.carry_partner[at(i)];
    v.reverse = g[i].kind == op::repeat_begin && g[i].reverse;
    if (const int block = c.block_input_of[at(i)]; block >= 0) {
      v.held_in = block;
      v.held_layer = g[block].reverse ? layers - 1 : 0;
    }
    if (written_into[at(i)] >= 0) v.held_in = written_into[at(i)], v.held_layer = -1;
    if (in.fused.stored_in[at(i)] >= 0) v.held_in = in.fused.stored_in[at(i)], v.held_layer = -1;
    if (v.per_layer) continue;  // own, unless in a layer block (below)
    if (!m.materialized[at(i)])
      v.kind = storage::none;
    else if (written_into[at(i)] >= 0 || c.held_elsewhere(i))
      v.kind = storage::elsewhere;
  }
  for (std::size_t k = 0; k < arena.values.size(); ++k) {
    values[at(arena.values[k])].kind = storage::arena;
    values[at(arena.values[k])].offset = arena.offsets[k];
  }
  for (std::size_t b = 0; b < blocks.size(); ++b)
    for (std::size_t member = 0; member < blocks[b].members.size(); ++member) {
      value_memory& v = values[at(blocks[b].members[member])];
      v.kind = storage::layer_block;
      v.group = static_cast<int>(b);
      v.offset = member * blocks[b].stride;
    }
  return values;
}

}  // namespace detail

// The memory plan of `in`'s program, for blocks of `layers` layers. Fails on an output name that is
// none of the program's (memory_options::outputs).
inline memory_layout plan_memory(const memory_inputs& in) {
  check_output_names(in.program, in.options.outputs);
  const materialized_values m = plan_materialized(in.program, in.steps, in.fused, in.options.outputs);
  const std::vector<int> written_into = plan_gradients_in_place(in, m.materialized);
  const carried_values carried = plan_carried_values(in, m, written_into);
  const std::vector<std::vector<int>> groups = batch_operand_groups(in, written_into, carried);
  memory_layout layout;
  layout.layers = in.steps.layers;
  layout.unread = m.unread;
  layout.layer_blocks = plan_layer_blocks(in, m.materialized, groups);
  const arena_layout arena = plan_arena(in, {m, written_into, carried}, groups);
  layout.arena_bytes = arena.bytes;
  layout.arena_shared = arena.shared;
  layout.arena_values_bytes = arena.values_bytes;
  layout.values =
      detail::value_memories(in, m, written_into, carried, layout.layer_blocks, arena, layout.layers);
  for (int v : written_into) layout.gradients_in_place += v >= 0;
  return layout;
}

}  // namespace shardgraph::plan
