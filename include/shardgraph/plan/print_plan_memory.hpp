#pragma once
// print_plan_memory: the memory parts of a bound plan's text (plan/print_bound_plan.hpp): the bytes
// bind allocated by kind with the arena among them, the gradient buckets, and ZeRO-3's gathers.
//
//   memory on this rank (what bind allocated; the optimizer's state comes on top)
//     parameters                 36480  (35.6 KiB)
//     arena                      12288  (12.0 KiB), shared by 14 values that would take 40960 apart
//   gradient buckets (in the order backward fills them)
//     bucket  reduction       axis  dtype  bytes       staging    gradients
//          0  all_reduce      dp    f64    35.6 KiB    buffer 0   grad.ln_f.bias, grad.ln_f.weight, ...
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "shardgraph/plan/bound_plan.hpp"
#include "shardgraph/plan/plan_text.hpp"

namespace shardgraph::plan {

namespace memory_text_detail {

// "  parameters                 36480  (35.6 KiB)"
inline void print_bytes(std::ostream& out, const std::string& what, std::int64_t bytes, const std::string& note = {}) {
  std::string number = std::to_string(bytes);
  if (number.size() < 14) number.insert(0, 14 - number.size(), ' ');
  out << "  " << column(what, 20) << number << "  (" << bytes_text(bytes) << ")" << note << '\n';
}

// A bucket's gradients: "grad.h.attn.c_attn.weight@1" (layer 1 of a block weight), wrapped.
inline std::string members_text(const bound_plan& p, const gradient_bucket& b, std::size_t indent) {
  const graph_view& g = p.compiled.nodes;
  std::string t, line;
  for (const bucket_member& m : b.members) {
    const int grad = g[m.node].kind == op::param_grad ? m.node : p.buckets.bucketed_grad[static_cast<std::size_t>(m.node)];
    std::string name = node_name(p, grad);
    if (g[m.node].body() >= 0) name += "@" + std::to_string(m.layer);  // a block's gradient: its layer
    if (!line.empty() && line.size() + name.size() + 2 > 72) {
      t += line + ",\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : ", ") + name;
  }
  return t + line;
}

}  // namespace memory_text_detail

inline void print_plan_memory(const bound_plan& p, std::ostream& out) {
  using memory_text_detail::print_bytes;
  const memory_report& m = p.totals;
  out << "\nmemory on this rank (what bind allocated; the optimizer's state comes on top)\n";
  print_bytes(out, "parameters", m.parameters);
  if (m.kv_cache > 0) print_bytes(out, "KV cache", m.kv_cache, ", every layer's blocks");
  if (m.shared_parameters + m.shared_kv_cache > 0)
    print_bytes(out, "shared", m.shared_parameters + m.shared_kv_cache,
                ", weights and KV cache of another binding (not in the total)");
  if (p.zero3.on()) print_bytes(out, "gathered parameters", m.gathered_parameters, ", whole weights while in use");
  print_bytes(out, "gradients", m.gradients,
              m.gradients_in_place > 0 ? ", " + std::to_string(m.gradients_in_place) + " written in place" : "");
  print_bytes(out, "activations", m.activations);
  print_bytes(out, "arena", m.arena,
              ", of the activations: shared by " + std::to_string(p.memory.arena_shared) + " values that would take " +
                  std::to_string(m.arena_values) + " apart");
  if (p.stages.pipelined())
    print_bytes(out, "per micro-batch", m.activations_per_micro_batch,
                ", of the activations, " + count_text(m.micro_batches_in_flight, "micro-batch", "micro-batches") + " in flight");
  print_bytes(out, "communication", m.communication, ", staging of collectives and buckets");
  print_bytes(out, "total",
              m.parameters + m.kv_cache + m.gathered_parameters + m.gradients + m.activations + m.communication);
}

inline void print_plan_buckets(const bound_plan& p, std::ostream& out) {
  const std::vector<gradient_bucket>& buckets = p.buckets.buckets;
  if (buckets.empty()) {
    if (p.compiled.is_training()) out << "\ngradient buckets: none (each gradient reduced where its step stands)\n";
    return;
  }
  out << "\ngradient buckets (in the order backward fills them"
      << (p.overlapped ? "; reduced on communication threads" : "") << ")\n"
      << "  " << column("bucket", 6) << column("reduction", 18) << column("axis", 5) << column("dtype", 6)
      << column("bytes", 11) << column("staging", 10) << "gradients\n";
  const std::size_t indent = 2 + 7 + 19 + 6 + 7 + 12 + 11;
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const gradient_bucket& b = buckets[k];
    const std::int64_t bytes = b.packed_elements() * static_cast<std::int64_t>(dtype_size(b.type));
    std::string number = std::to_string(k);
    if (number.size() < 6) number.insert(0, 6 - number.size(), ' ');
    out << "  " << number << ' '
        << column(b.scatter ? "reduce_scatter /" + std::to_string(b.parts) : std::string("all_reduce"), 18)
        << column(std::string(p.compiled.nodes.axes.name(b.axis)), 5) << column(std::string(dtype_name(b.type)), 6)
        << column(bytes_text(bytes), 11)
        << column(b.staging >= 0 ? "buffer " + std::to_string(b.staging) : std::string("in place"), 10)
        << memory_text_detail::members_text(p, b, indent) << '\n';
  }
}

inline void print_plan_zero3(const bound_plan& p, std::ostream& out) {
  const zero3_gathers& z = p.zero3;
  if (!z.on()) return;
  const graph_view& g = p.compiled.nodes;
  const auto whole = [&](int i) { return z.gathered(i) * static_cast<std::int64_t>(dtype_size(g[i].type)); };
  out << "\nZeRO-3 over " << g.axes.name(z.axis) << " (" << z.parts << " ranks): this rank stores chunk "
      << z.coordinate << " of every parameter\n";
  std::int64_t bytes = 0;
  std::string names;
  for (int i : z.unlayered) bytes += whole(i), names += (names.empty() ? "" : ", ") + node_name(p, i);
  out << "  gathered when forward() starts, released when it ends: " << z.unlayered.size() << " weights, "
      << bytes_text(bytes) << (names.empty() ? "" : ": " + names) << '\n';
  for (int b = 0; b < g.size(); ++b) {
    const std::vector<int>& weights = z.layer_weights[static_cast<std::size_t>(b)];
    if (weights.empty()) continue;
    std::int64_t layer = 0;
    for (int i : weights) layer += whole(i);
    out << "  " << node_name(p, b) << (g[b].reverse ? " (backward)" : "") << ": " << weights.size()
        << " weights gathered per layer into one of two buffers, the next layer's ahead: " << bytes_text(layer)
        << " a layer\n";
  }
}

}  // namespace shardgraph::plan
