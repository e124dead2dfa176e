#pragma once
// attach_kv_cache: the rewrite that turns a model's forward graph into a generation program
// (compile_graph with inference{.kv_cache = true}). It runs after propagate_sharding, so the cache
// takes the placement of the keys it stores:
//
//   input kv_context (batch, kv_table) i32          row b: [tokens in b's cache after this step,
//                                                    then the ids of b's cache blocks, in order]
//   per causal self-attention in a repeat block:
//     parameter <block>...kv_cache (kv_blocks, kv_heads, 2 * kv_block_tokens, head_dim), state
//     cached_attention(q, k, v, kv_cache, kv_context)   writes this step's k and v (after rope) at
//       the rows' positions, then attends q over the first kv_context[b][0] cached tokens
//   rope(x) -> rope(x, kv_context), position_embedding(x, t) -> position_embedding(x, t, kv_context):
//       the chunk's tokens are at the absolute positions [kv_context[b][0] - seq, kv_context[b][0])
//
// Positions along another dimension than the step's `seq` (an image's patches in a vision tower,
// vision_seq) are not the cached tokens': their rope and position_embedding stay as they are.
// The loss and its targets are left out: a generation program's outputs are the model's other
// outputs (the logits).
// A cache block holds kv_block_tokens tokens: rows [0, kv_block_tokens) of a (block, kv head) are
// keys, the next kv_block_tokens rows values. One layer's cache is one parameter of the block
// (stacked per layer like its weights), placed as the keys it stores: Shard<1> where the kv heads
// are sharded (tensor parallel), Shard<0> where the batch is (each data-parallel rank owns its own
// kv_blocks / ranks blocks, and a block id in kv_context is local to that rank's pool).
// The sizes kv_blocks, kv_block_tokens and kv_table are set at bind (set_kv_cache_sizes in
// runtime/kv_cache.hpp).
// Errors: a graph with no such attention to cache, one whose only output is its loss, and a rope
// of rope_type dynamic (its table depends on the whole length, which a step does not see).
#include "shardgraph/core/extent.hpp"
#include "shardgraph/ir/graph.hpp"

namespace shardgraph {

inline constexpr extent kv_blocks_dim = dim::named<"kv_blocks">;
inline constexpr extent kv_block_tokens_dim = dim::named<"kv_block_tokens">;
inline constexpr extent kv_table_dim = dim::named<"kv_table">;
inline constexpr std::string_view kv_context_name = "kv_context";

namespace passes {

namespace detail {

// An attention the cache serves: self-attention, causal, unmasked, inside a repeat block.
constexpr bool cacheable_attention(const node& n) {
  return n.kind == op::attention && n.input_count == 3 && n.masking.causal && n.region >= 0;
}

// A rope or position_embedding over the step's tokens: its sequence dimension (x (batch, heads,
// seq, head_dim), resp. (batch, seq, model)) is `seq`, which kv_context places.
template <std::size_t Capacity>
constexpr bool step_positions(const basic_graph<Capacity>& g, const node& n) {
  if (n.kind == op::rope) return g[n.inputs[0]].shape[2] == dim::seq;
  if (n.kind == op::position_embedding) return g[n.inputs[0]].shape[1] == dim::seq;
  return false;
}

// On each mesh axis, Shard<0> (the batch) where `s` shards it; otherwise Replicate.
constexpr shard_spec batch_placement(const shard_spec& s, int axes) {
  shard_spec batch;
  for (int a = 0; a < axes; ++a) batch[a] = s[a].is_shard(0) ? s[a] : replicate;
  return batch;
}

// "layers.self_attn.attention" -> "layers.self_attn.kv_cache"; a name outside its block's scope
// -> "<block>.kv_cache".
constexpr name_buffer cache_name(std::string_view attention, std::string_view block) {
  if (attention.ends_with(".attention")) attention.remove_suffix(std::string_view(".attention").size());
  name_buffer name(attention.starts_with(block) && attention.size() > block.size() ? attention : block);
  name.append(".kv_cache");
  return name;
}

constexpr node kv_context_input(const shard_spec& spec) {
  node n;
  n.kind = op::input;
  n.name.assign(kv_context_name);
  n.shape = shape{dim::batch, kv_table_dim};
  n.type = dtype::i32;
  n.spec = spec;
  n.annotated = true;
  return n;
}

constexpr node cache_parameter(const node& attention, const node& keys, std::string_view block) {
  node n;
  n.kind = op::parameter;
  n.name = cache_name(attention.name.view(), block);
  n.shape = shape{kv_blocks_dim, keys.shape[1], dim::fixed<2> * kv_block_tokens_dim, keys.shape[3]};
  n.type = keys.type;
  n.spec = attention.required[1];  // the keys' placement: batch -> blocks, kv heads -> kv heads
  n.region = attention.region;
  n.annotated = true;
  n.kv_cache = true;
  return n;
}

// live[i]: node i feeds an output that generation reads; a loss output (a cross-entropy's) does
// not, so the loss, its targets input and their statistics are left out of the program.
template <std::size_t Capacity>
constexpr void mark_generated_values(const basic_graph<Capacity>& g, bool (&live)[Capacity]) {
  for (int i = g.size() - 1; i >= 0; --i) {
    const node& n = g[i];
    if (n.kind == op::output && g[n.inputs[0]].kind != op::cross_entropy) live[i] = true;
    if (!live[i]) continue;
    for (int k = 0; k < n.input_count; ++k) live[n.inputs[k]] = true;
    if (n.region >= 0) live[n.region] = true;
  }
}

// `in` with the error `why_and_how` reported at its last node.
template <std::size_t Capacity>
constexpr basic_graph<Capacity> refused(const basic_graph<Capacity>& in, std::string_view why_and_how) {
  basic_graph<Capacity> g = in;
  if (diagnostic* d = g.report(g.size() - 1)) *d << why_and_how;
  return g;
}

}  // namespace detail

template <std::size_t Capacity>
constexpr basic_graph<Capacity> attach_kv_cache(const basic_graph<Capacity>& in) {
  if (!in.ok()) return in;
  int first_attention = -1;
  for (int i = 0; i < in.size() && first_attention < 0; ++i)
    if (detail::cacheable_attention(in[i])) first_attention = i;
  if (first_attention < 0)
    return detail::refused(in, "inference{.kv_cache = true} finds no causal self-attention inside a repeat block to "
                               "cache. build the attention with attention(q, k, v) inside repeat(), or compile "
                               "without kv_cache");
  const int axes = in.axes.size();

  basic_graph<Capacity> g;
  g.axes = in.axes;
  g.error = in.error;
  const int context = g.add(detail::kv_context_input(detail::batch_placement(in[first_attention].required[0], axes)));
  int new_index[Capacity]{};
  bool live[Capacity]{};
  detail::mark_generated_values(in, live);
  bool any_output = false;
  for (int i = 0; i < in.size(); ++i) any_output = any_output || (live[i] && in[i].kind == op::output);
  if (!any_output)
    return detail::refused(in, "a generation program returns the model's outputs other than its loss, and this "
                               "model has none. add output(logits, \"logits\") to the model");
  for (int i = 0; i < in.size(); ++i) {
    if (!live[i]) continue;
    node n = in[i];
    for (int k = 0; k < n.input_count; ++k) n.inputs[k] = new_index[n.inputs[k]];
    if (n.region >= 0) n.region = new_index[n.region];
    if (n.origin >= 0) n.origin = new_index[n.origin];
    if (detail::cacheable_attention(in[i])) {
      const int cache = g.add(detail::cache_parameter(n, g[n.inputs[1]], g[n.region].name.view()));
      n.kind = op::cached_attention;
      n.inputs[3] = cache;
      n.required[3] = g[cache].spec;
      n.inputs[4] = context;
      n.required[4] = detail::batch_placement(n.required[0], axes);
      n.input_count = 5;
    } else if (detail::step_positions(in, in[i])) {
      n.inputs[n.input_count] = context;
      n.required[n.input_count] = detail::batch_placement(n.required[0], axes);
      ++n.input_count;
    }
    new_index[i] = g.add(n);
    if (n.kind == op::rope && n.rope.type == rope_type::dynamic)
      if (diagnostic* d = g.report(new_index[i]))
        *d << "rope_type dynamic rescales with the sequence's whole length, which a generation step does "
           << "not see. generate with a model of another rope_type";
  }
  return g;
}

}  // namespace passes
}  // namespace shardgraph
