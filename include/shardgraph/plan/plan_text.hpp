#pragma once
// plan_text: the words and figures the bound plan's printer (plan/print_bound_plan.hpp) writes for
// one value: its size, its local shape and where it lives.
//
//   bytes_text(12288)           -> "12.0 KiB"
//   local_shape_text(p, i)      -> "(8, 8, 32)"
//   place_text(p, i, 0)         -> "arena+4096", "parameter", "own, per layer", "in h.attn.merge_heads: own"
//   buffer_text(p, i, 0)        -> "h.ln_2 [arena+4096, 4.0 KiB]"
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "shardgraph/plan/bound_plan.hpp"

namespace shardgraph::plan {

// "512 B", "12.0 KiB", "1.5 MiB", "2.25 GiB": one decimal below a GiB, two from it.
inline std::string bytes_text(std::int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  char text[32];
  const double b = static_cast<double>(bytes);
  if (bytes < (std::int64_t{1} << 20))
    std::snprintf(text, sizeof text, "%.1f KiB", b / 1024.0);
  else if (bytes < (std::int64_t{1} << 30))
    std::snprintf(text, sizeof text, "%.1f MiB", b / (1024.0 * 1024.0));
  else
    std::snprintf(text, sizeof text, "%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// "1 layer", "2 layers"; "2 micro-batches" with the plural given.
inline std::string count_text(std::int64_t n, const std::string& thing, const std::string& things = {}) {
  return std::to_string(n) + " " + (n == 1 ? thing : things.empty() ? thing + "s" : things);
}

// Node i's bytes on this rank (one layer's, for a value kept per layer).
inline std::int64_t value_bytes(const bound_plan& p, int i) {
  return p.layout.of(i).numel() * static_cast<std::int64_t>(dtype_size(p.compiled.nodes[i].type));
}

// Node i's local shape: "(8, 8, 32)", "()" for a scalar.
inline std::string local_shape_text(const bound_plan& p, int i) {
  std::string t = "(";
  for (const std::int64_t d : p.layout.of(i).local) t += (t.size() > 1 ? ", " : "") + std::to_string(d);
  return t + ")";
}

// The block layers this rank runs (all of them but on a pipeline stage).
inline std::int64_t held_layers(const bound_plan& p) {
  std::int64_t held = 0;
  for (std::int64_t l = 0; l < p.steps.layers; ++l) held += p.stages.holds_layer(l) ? 1 : 0;
  return held;
}

inline std::string node_name(const bound_plan& p, int i) { return std::string(p.compiled.nodes[i].name.view()); }

// Where node i's value lives while layer `layer` runs: a parameter ("parameter"; ZeRO-3: "gathered"
// whole from the chunks), the arena at a byte offset, a layer block at one, memory of its own (per
// layer or once), or another value's memory ("in <name>: <its place>").
inline std::string place_text(const bound_plan& p, int i, std::int64_t layer) {
  const node& n = p.compiled.nodes[i];
  const bool block_weight = n.region >= 0;
  if (n.kind == op::parameter) {
    if (p.zero3.on()) return block_weight ? "gathered, 2 layers" : "gathered";
    return block_weight ? "parameter, per layer" : "parameter";
  }
  const value_place at = p.memory.place_of(i, layer);
  const value_memory& m = p.memory.values[static_cast<std::size_t>(at.node)];
  std::string t;
  switch (m.kind) {
    case storage::arena:
      t = "arena+" + std::to_string(m.offset);
      break;
    case storage::layer_block:
      t = "layer block " + std::to_string(m.group) + "+" + std::to_string(m.offset);
      break;
    case storage::own:
      t = p.compiled.nodes[at.node].kind == op::param_grad ? "gradient" : "own";
      if (m.per_layer) t += ", per layer";
      break;
    case storage::elsewhere:
      t = "elsewhere";
      break;
    case storage::none:
      t = "none";
      break;
  }
  return at.node == i ? t : "in " + node_name(p, at.node) + ": " + t;
}

// "[arena+0, 2.0 KiB]": a value's place and size.
inline std::string placed_text(const bound_plan& p, int i, std::int64_t layer) {
  return "[" + place_text(p, i, layer) + ", " + bytes_text(value_bytes(p, i)) + "]";
}

// "h.ln_1 [arena+0, 2.0 KiB]": a value with its place and size.
inline std::string buffer_text(const bound_plan& p, int i, std::int64_t layer) {
  return node_name(p, i) + " " + placed_text(p, i, layer);
}

// `text` padded with spaces to `width`, then one space.
inline std::string column(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text + ' ';
}

}  // namespace shardgraph::plan
