#pragma once
// local_layout: the shape of every node's value on one rank (DESIGN §3, bind). A dimension
// sharded on mesh axis a of size n holds global/n elements starting at coordinate(a) * global/n.
// Sharding a product extent (heads * head_dim) splits its first factor, so every rank holds
// whole heads; kv heads fewer than the ranks are replicated (shard_parts). All checks run before any compute and depend only on sizes, so every rank
// throws the same error. Every node's element count (the product of its global dimensions) is
// checked to fit in 64 bits here, so the products of its dimensions taken later cannot overflow.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/runtime/convolution_sizes.hpp"
#include "shardgraph/mesh/mesh_shape.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/along_dimension_checks.hpp"

namespace shardgraph {

// The parts a dimension whose leading factor has `first` entries splits into over `shards` ranks:
// `shards`, or, for kv heads fewer than the ranks that divide them (grouped-query attention under
// tensor parallelism), `first`: each kv head held whole by shards / first consecutive ranks, the
// ones whose query heads read it, as Megatron-LM replicates them. 0: it does not split.
inline std::int64_t shard_parts(extent e, std::int64_t first, std::int64_t shards) {
  if (first % shards == 0) return shards;
  if (e.first == dim::kv_heads.first && first > 0 && shards % first == 0) return first;
  return 0;
}

struct local_dims {
  std::vector<std::int64_t> global, local, offset;
  std::int64_t numel() const { return checked_product(local, "local_dims::numel"); }
  std::int64_t rank() const { return static_cast<std::int64_t>(local.size()); }
};

class local_layout {
 public:
  local_layout(const program_view& p, const model_sizes& sizes, const mesh_shape& mesh, std::vector<int> coordinates)
      : coordinates_(std::move(coordinates)) {
    const graph_view& g = p.nodes;
    dims_.resize(static_cast<std::size_t>(g.size()));
    for (int i = 0; i < g.size(); ++i) {
      const node& n = g[i];
      local_dims& d = dims_[static_cast<std::size_t>(i)];
      for (int k = 0; k < n.shape.rank(); ++k) {
        extent e = n.shape[k];
        std::int64_t global = sizes.get(e);
        std::int64_t local = global, offset = 0;
        for (int a = 0; a < g.axes.size(); ++a) {
          if (!n.spec[a].is_shard(k)) continue;
          int shards = mesh.size(g.axes.name(a));
          std::int64_t first = sizes.get(e.first);
          const std::int64_t parts = shard_parts(e, first, shards);
          if (parts != shards) check_replicated_kv_heads(p, n, first, shards, g.axes.name(a));
          if (parts == 0)
            fail(std::string("bind: ") + std::string(op_name(n)) + " '" + std::string(n.name.view()) + "'",
                 "dimension " + std::to_string(k) + " (" + extent_text(e) + ") is sharded on '" +
                     std::string(g.axes.name(a)) + "' but " + std::string(dimension_name(e.first)) + " = " +
                     std::to_string(first) + " is not divisible by " + std::string(g.axes.name(a)) + " = " +
                     std::to_string(shards),
                 "choose a mesh size that divides " + std::string(dimension_name(e.first)) + ", or change the model's " +
                     std::string(dimension_name(e.first)));
          local = global / parts;
          offset = coordinates_[static_cast<std::size_t>(a)] / (shards / parts) * local;
        }
        d.global.push_back(global);
        d.local.push_back(local);
        d.offset.push_back(offset);
      }
      checked_product(d.global, where_of(n) + ": its shape (" + shape_text(n, d) + ")");
      check_op(g, i, sizes);
    }
  }

  const local_dims& of(int node) const { return dims_[static_cast<std::size_t>(node)]; }
  int coordinate(int axis) const { return coordinates_[static_cast<std::size_t>(axis)]; }

 private:
  static std::string where_of(const node& n) {
    return std::string("bind: ") + std::string(op_name(n)) + " '" + std::string(n.name.view()) + "'";
  }
  // "vocab = 4611686018427387904, model = 64"
  static std::string shape_text(const node& n, const local_dims& d) {
    std::string s;
    for (int k = 0; k < n.shape.rank(); ++k)
      s += (k ? ", " : "") + extent_text(n.shape[k]) + " = " +
           std::to_string(d.global[static_cast<std::size_t>(k)]);
    return s;
  }
  // Replicated kv heads hold the same weights on several ranks: a training program would need
  // their gradients summed over those ranks, and a collective that gathers or splits a value along
  // them would move the replicas as parts; the program does neither right, so both are refused.
  static void check_replicated_kv_heads(const program_view& p, const node& n, std::int64_t kv_heads, int shards,
                                        std::string_view axis) {
    if (kv_heads <= 0 || shards % kv_heads != 0) return;
    const std::string replicated = "kv_heads = " + std::to_string(kv_heads) + " is fewer than " + std::string(axis) +
                                   " = " + std::to_string(shards) + ": each kv head would be replicated on " +
                                   std::to_string(shards / kv_heads) + " ranks";
    if (p.nodes.count(op::param_grad) > 0)
      fail(where_of(n), replicated + ", which only inference does", "train with a tensor-parallel size that divides kv_heads");
    const graph_view& g = p.nodes;
    for (int i = 0; i < g.size(); ++i) {
      if (!is_redistribution(g[i].kind)) continue;
      for (int k : {g[i].from_dim, g[i].to_dim})
        if (k >= 0 && k < g[i].shape.rank() && g[i].shape[k].first == dim::kv_heads.first)
          fail(where_of(n), replicated + ", but " + where_of(g[i]).substr(6) + " moves a value along them",
               "use a tensor-parallel size that divides kv_heads");
    }
  }
  void check_op(const graph_view& g, int i, const model_sizes& sizes) const {
    const node& n = g[i];
    const std::string where = where_of(n);
    if (n.kind == op::attention || n.kind == op::cached_attention) {
      const local_dims& q = of(n.inputs[0]);
      const local_dims& k = of(n.inputs[1]);
      if (q.local[1] % k.local[1] != 0)
        fail(where, std::to_string(q.local[1]) + " query heads per rank are not a multiple of " +
                        std::to_string(k.local[1]) + " key/value heads per rank",
             "choose heads a multiple of kv_heads, and a tensor-parallel size dividing kv_heads");
    }
    if (n.kind == op::position_embedding && n.input_count == 2 &&  // with kv_context: checked per position
        sizes.get(size_symbol::seq) > sizes.get(size_symbol::positions))
      fail(where, "seq = " + std::to_string(sizes.get(size_symbol::seq)) + " exceeds the " +
                      std::to_string(sizes.get(size_symbol::positions)) + " learned positions",
           "use a shorter sequence or a model with more positions");
    if (n.kind == op::concat || n.kind == op::slice)
      check_along_dimension(g, i, sizes, [&](int j) -> const std::vector<std::int64_t>& { return of(j).global; }, where);
    if (n.kind == op::patchify || n.kind == op::unfold1d)
      check_convolution_sizes(n, of(n.inputs[0]).global, of(i).global, sizes, where);
  }

  std::vector<int> coordinates_;
  std::vector<local_dims> dims_;
};

}  // namespace shardgraph
