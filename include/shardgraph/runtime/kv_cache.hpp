#pragma once
// A generation program's KV cache at run time (passes/attach_kv_cache.hpp): its sizes, its
// hand-over from the prefill rank to the decode rank, and the check of kv_context before a step.
//
//   auto sizes = config.sizes(batch, prompt_length);
//   set_kv_cache_sizes(sizes, {.blocks = 64, .block_tokens = 16, .max_blocks = 8});
//   auto prefill = bind(generation, sizes, comm, cpu::backend{}, mesh, weights);
//   auto decode = prefill.rebind(config.sizes(batch, 1) + the same cache sizes);   // one cache
//   auto context = make_kv_context(block_tables, context_lengths);   // (batch, 1 + max_blocks) i32
//   prefill.forward({{"input_ids", prompt}, {"kv_context", context}});
//   decode.forward(...);   // goes on from the prompt's cache
//
// A rank binds one seq; the prefill rank (seq = the prompt's length) and the decode rank (seq = 1)
// are two bindings of one program with the same cache sizes, which share the weights and the cache
// (runtime/shared_parameters.hpp). copy_kv_cache copies the cache between two that do not share.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/compute/kv_context.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/mesh/mesh_shape.hpp"
#include "shardgraph/passes/attach_kv_cache.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph {

struct kv_cache_shape {
  std::int64_t blocks = 0;         // cache blocks of the whole mesh (each data-parallel rank holds 1/dp)
  std::int64_t block_tokens = 16;  // tokens per block
  std::int64_t max_blocks = 0;     // blocks of the longest sequence: kv_context has 1 + max_blocks columns
};

inline model_sizes& set_kv_cache_sizes(model_sizes& sizes, const kv_cache_shape& c) {
  if (c.blocks < 1 || c.block_tokens < 1 || c.max_blocks < 1)
    fail("set_kv_cache_sizes",
         "blocks " + std::to_string(c.blocks) + ", block_tokens " + std::to_string(c.block_tokens) +
             " and max_blocks " + std::to_string(c.max_blocks) + " must all be positive",
         "give the cache at least one block of one token, and each sequence a block");
  sizes.set(dimension_name(kv_blocks_dim.first), c.blocks);
  sizes.set(dimension_name(kv_block_tokens_dim.first), c.block_tokens);
  sizes.set(dimension_name(kv_table_dim.first), 1 + c.max_blocks);
  return sizes;
}

// The bytes one cache block takes on one rank: the keys and values of kv_block_tokens tokens for
// the rank's kv heads, in every layer it holds. `sizes` needs kv_block_tokens (set_kv_cache_sizes);
// a KV memory budget divided by this gives the blocks a rank can hold. `layers_held`: the block
// layers of a pipeline stage (rank_program::pipeline_chunks); -1: all of them. Every stage holds
// the same blocks (a sequence's tokens are cached in every layer), so a pipeline's pool has the
// fewest blocks any stage's budget holds.
inline std::int64_t kv_cache_bytes_per_block(const program_view& p, const model_sizes& sizes, const mesh_shape& mesh,
                                             std::int64_t layers_held = -1) {
  const graph_view& g = p.nodes;
  const std::int64_t layers = layers_held >= 0 ? layers_held : sizes.get(size_symbol::layers);
  std::int64_t bytes = 0;
  for (int i = 0; i < g.size(); ++i) {
    const node& n = g[i];
    if (!n.kv_cache) continue;
    std::int64_t block = static_cast<std::int64_t>(dtype_size(n.type)) * (n.region >= 0 ? layers : 1);
    for (int k = 1; k < n.shape.rank(); ++k) {  // (kv_heads, 2 block_tokens, head_dim) of one block
      std::int64_t size = sizes.get(n.shape[k]);
      for (int a = 0; a < g.axes.size(); ++a)
        if (n.spec[a].is_shard(k))  // as local_layout splits it (kv heads may be replicated)
          if (const std::int64_t parts = shard_parts(n.shape[k], sizes.get(n.shape[k].first), mesh.size(g.axes.name(a))))
            size /= parts;
      block *= size;
    }
    bytes += block;
  }
  return bytes;
}

// The kv_context input (batch, 1 + max_blocks) i32 from a scheduler's block tables (batch,
// max_blocks) i32 and the tokens each sequence has in its cache after the step (batch) i32:
// row b = [context_lengths[b], block_tables[b]...].
inline host_tensor make_kv_context(const host_tensor& block_tables, const host_tensor& context_lengths) {
  if (block_tables.type() != dtype::i32 || block_tables.shape().size() != 2 || context_lengths.type() != dtype::i32 ||
      context_lengths.shape() != std::vector<std::int64_t>{block_tables.shape()[0]})
    fail("make_kv_context", "block tables must be (batch, max_blocks) i32 and context lengths (batch) i32",
         "pass one block table row and one length per sequence, as i32");
  const std::int64_t batch = block_tables.shape()[0], blocks = block_tables.shape()[1];
  const auto* tables = reinterpret_cast<const std::int32_t*>(block_tables.bytes().data());
  const auto* lengths = reinterpret_cast<const std::int32_t*>(context_lengths.bytes().data());
  std::vector<std::int32_t> rows;
  for (std::int64_t b = 0; b < batch; ++b) {
    rows.push_back(lengths[b]);
    rows.insert(rows.end(), tables + b * blocks, tables + (b + 1) * blocks);
  }
  return host_tensor::from<std::int32_t>({batch, 1 + blocks}, rows);
}

// Checks the whole kv_context input (every row, on every rank alike, so that a bad row fails on
// all ranks before any collective) against this rank's cache (its block size and its pool) and
// against the learned positions a position_embedding has. `seq`: the step's tokens per row.
inline void check_kv_context_input(const graph_view& g, const local_layout& layout, int input,
                                   const host_tensor& whole, std::int64_t seq) {
  const std::vector<std::int64_t>& shape = layout.of(input).global;  // (batch, width)
  const auto* context = reinterpret_cast<const std::int32_t*>(whole.bytes().data());
  const std::string where = "forward: input 'kv_context'";
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind == op::position_embedding && g[i].input_count == 3)
      for (std::int64_t b = 0, rows = layout.of(g[i].inputs[1]).global[0]; b < shape[0]; ++b)
        if (context[b * shape[1]] > rows)
          fail(where,
               "row " + std::to_string(b) + " of kv_context reaches position " + std::to_string(context[b * shape[1]] - 1) +
                   ", past the " + std::to_string(rows) + " learned positions",
               "stop generating at the model's positions (n_positions)");
    if (!g[i].kv_cache) continue;
    const std::vector<std::int64_t>& cache = layout.of(i).local;  // (blocks, kv_heads, 2 block_tokens, head_dim)
    compute::check_kv_context(context, {shape[0], seq, shape[1], cache[2] / 2, cache[0]}, where);
  }
}

// Copies every layer's KV cache of rank `from` into rank `to`: two bindings of one generation
// program on this rank with the same cache sizes (the prefill and the decode rank).
template <class Rank>
void copy_kv_cache(Rank& from, Rank& to) {
  using buffer = typename Rank::buffer;
  std::map<std::string, std::pair<buffer*, std::int64_t>> caches;  // name -> (value, elements)
  from.for_each_parameter([&](const std::string& name, const node& p, std::int64_t, buffer& value, buffer*) {
    if (p.kv_cache) caches.emplace(name, std::pair{&value, from.local_numel(p)});
  });
  if (caches.empty())
    fail("copy_kv_cache", "the rank holds no KV cache",
         "compile the program with inference{.kv_cache = true}");
  to.for_each_parameter([&](const std::string& name, const node& p, std::int64_t, buffer& value, buffer*) {
    if (!p.kv_cache) return;
    auto found = caches.find(name);
    if (found == caches.end() || found->second.second != to.local_numel(p))
      fail("copy_kv_cache", "the ranks' caches '" + name + "' differ", "bind both ranks from one program with the same kv_cache sizes");
    to.backend().copy(*found->second.first, value);
  });
}

}  // namespace shardgraph
