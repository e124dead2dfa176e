#pragma once
// Symbolic extents: the size of a tensor dimension, named at compile time, valued at bind time.
// An extent is one size symbol (`dim::model`) or the product of two (`dim::heads * dim::head_dim`);
// sharding a product splits its first factor, so `heads * head_dim` sharded on tp=4 needs heads % 4 == 0.
#include <cstdint>
#include <string_view>

#include "shardgraph/core/constexpr_fail.hpp"

namespace shardgraph {

enum class size_symbol : std::uint8_t {
  none, batch, seq, model, ffn, vocab, heads, kv_heads, head_dim, positions, layers, one, count_
};
inline constexpr int size_symbol_count = static_cast<int>(size_symbol::count_);

constexpr std::string_view symbol_name(size_symbol s) {
  switch (s) {
    case size_symbol::none: return "";
    case size_symbol::batch: return "batch";
    case size_symbol::seq: return "seq";
    case size_symbol::model: return "model";
    case size_symbol::ffn: return "ffn";
    case size_symbol::vocab: return "vocab";
    case size_symbol::heads: return "heads";
    case size_symbol::kv_heads: return "kv_heads";
    case size_symbol::head_dim: return "head_dim";
    case size_symbol::positions: return "positions";
    case size_symbol::layers: return "layers";
    case size_symbol::one: return "1";
    case size_symbol::count_: break;
  }
  return "?";
}

struct extent {
  size_symbol first = size_symbol::none;
  size_symbol second = size_symbol::none;  // none: a single symbol

  constexpr bool is_product() const { return second != size_symbol::none; }
  friend constexpr bool operator==(const extent&, const extent&) = default;
  friend constexpr extent operator*(extent a, extent b) {
    if (a.is_product() || b.is_product())
      constexpr_fail("shardgraph: extent: a product of more than two size symbols. name a size symbol for the product");
    return {a.first, b.first};
  }
};

// The symbols users write in shapes: `{dim::batch, dim::seq, dim::model}`.
namespace dim {
inline constexpr extent batch{size_symbol::batch};
inline constexpr extent seq{size_symbol::seq};
inline constexpr extent model{size_symbol::model};
inline constexpr extent ffn{size_symbol::ffn};
inline constexpr extent vocab{size_symbol::vocab};
inline constexpr extent heads{size_symbol::heads};
inline constexpr extent kv_heads{size_symbol::kv_heads};
inline constexpr extent head_dim{size_symbol::head_dim};
inline constexpr extent positions{size_symbol::positions};
inline constexpr extent one{size_symbol::one};
}  // namespace dim

}  // namespace shardgraph
