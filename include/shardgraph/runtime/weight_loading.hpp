#pragma once
// load_weights: fills a rank's parameters from a weight source at bind (plan/held_parameters.hpp says
// which slices), rank 0 showing progress for large loads (runtime/load_progress.hpp).
//
//   load_weights(g, layout, plan::plan_held_parameters(g, layout, layers, stages), weights, rank == 0,
//                [&](int node, std::int64_t layer, const host_tensor& slice) { /* upload it */ });
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/core/weight_source.hpp"
#include "shardgraph/plan/held_parameters.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/load_progress.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph {

namespace detail {
// "h.attn.q.weight" in block "h", layer 3 -> "h.3.attn.q.weight"
inline std::string layer_name(std::string_view param, std::string_view block, std::int64_t layer) {
  return std::string(block) + "." + std::to_string(layer) + std::string(param.substr(block.size()));
}
}  // namespace detail

// Parameter p's name in a weight source: a block weight's carries its layer ("h.3.attn.q.weight").
inline std::string parameter_name(const graph_view& g, const node& p, std::int64_t layer) {
  return p.region >= 0 ? detail::layer_name(p.name.view(), g[p.region].name.view(), layer)
                       : std::string(p.name.view());
}

// Reads each slice of `held` from `weights` and hands it to store(node, layer, host slice), layer
// 0 for a weight outside the block.
template <class Store>
void load_weights(const graph_view& g, const local_layout& layout, const plan::held_parameters& held,
                  const weight_source& weights, bool reporting_rank, Store&& store) {
  load_progress progress(held.bytes, reporting_rank);
  // One host tensor while the shape repeats (a block's weight, layer after layer): zeroed again
  // rather than allocated again, so its pages are faulted in once.
  host_tensor host;
  for (const plan::held_parameter& load : held.slices) {
    const node& n = g[load.node];
    const local_dims& d = layout.of(load.node);
    if (host.type() != n.type || host.shape() != d.local)
      host = host_tensor(n.type, d.local);
    else
      std::memset(host.bytes().data(), 0, host.bytes().size());
    if (!n.kv_cache)  // a KV cache is state the program writes: it starts at zero
      weights(parameter_name(g, n, load.layer), tensor_slice{d.global, d.offset, d.local}, host);
    store(load.node, std::max<std::int64_t>(load.layer, 0), static_cast<const host_tensor&>(host));
    progress.add(host.bytes().size());
  }
  progress.finish();
}

}  // namespace shardgraph
