#pragma once
// Symbolic extents: the size of a tensor dimension, named at compile time, valued at bind time.
// An extent is one dimension (`dim::model`) or the product of two (`dim::heads * dim::head_dim`);
// sharding a product splits its first factor, so `heads * head_dim` sharded on tp=4 needs heads % 4 == 0.
//
// A dimension is a built-in one (dim::batch, dim::model, ...: sized by the model's config), one the
// user names (dim::named<"experts">: sized at bind by name, `sizes.set("experts", 8)`), or a number
// fixed at compile time (dim::fixed<16>: needs no size at bind). All three mix freely in shapes and
// products: `{dim::batch, dim::named<"patches">, dim::named<"experts"> * dim::fixed<16>}`.
// Each dimension is one static object, and an extent holds pointers to them: two extents name the
// same dimension when they point at the same object, which `dim::named` makes one per name.
#include <cstdint>
#include <string>
#include <string_view>

#include "shardgraph/core/constexpr_fail.hpp"
#include "shardgraph/core/fixed_string.hpp"

namespace shardgraph {

// The built-in dimensions, each a slot of model_sizes' values.
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

// The built-in dimension called `name`, or none.
constexpr size_symbol builtin_symbol(std::string_view name) {
  for (int s = 1; s < size_symbol_count; ++s)
    if (symbol_name(static_cast<size_symbol>(s)) == name) return static_cast<size_symbol>(s);
  return size_symbol::none;
}

// One dimension: its name as printers show it, and where its size comes from.
struct dimension {
  name_buffer name;                         // "model", "experts", "16"
  size_symbol builtin = size_symbol::none;  // a built-in's slot in model_sizes; none for the others
  std::int64_t fixed = 0;                   // > 0: its size, given at compile time
};

namespace detail {
template <size_symbol S>
inline constexpr dimension builtin_dimension{symbol_name(S), S};

constexpr dimension user_dimension(std::string_view name) {
  if (name.empty()) constexpr_fail("shardgraph: dim::named: a dimension's name is empty. give it a name, as dim::named<\"experts\">");
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      constexpr_fail("shardgraph: dim::named: a dimension's name holds a character other than a letter, digit or '_'. name it with letters, digits and '_'");
  if (name[0] >= '0' && name[0] <= '9')
    constexpr_fail("shardgraph: dim::named: a dimension's name starts with a digit. start it with a letter, or fix a number with dim::fixed<16>");
  if (builtin_symbol(name) != size_symbol::none)
    constexpr_fail("shardgraph: dim::named: the name is a built-in dimension's. use the built-in one (dim::model, ...) or another name");
  if (name.size() >= name_buffer::capacity)
    constexpr_fail("shardgraph: dim::named: a dimension's name is longer than 55 characters. use a shorter name");
  return dimension{name};
}

constexpr dimension fixed_dimension_of(std::int64_t size) {
  if (size <= 0) constexpr_fail("shardgraph: dim::fixed: a fixed dimension's size is not positive. give a size of at least 1");
  char digits[20]{};
  int n = 0;
  for (std::int64_t v = size; v > 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  dimension d;
  for (int i = 0; i < n; ++i) d.name.chars[i] = digits[n - 1 - i];
  d.fixed = size;
  return d;
}

template <fixed_string Name>
inline constexpr dimension named_dimension = user_dimension(Name.view());
template <std::int64_t Size>
inline constexpr dimension fixed_dimension = fixed_dimension_of(Size);
}  // namespace detail

struct extent {
  const dimension* first = nullptr;
  const dimension* second = nullptr;  // null: a single dimension

  constexpr bool is_product() const { return second != nullptr; }
  friend constexpr bool operator==(const extent&, const extent&) = default;
  friend constexpr extent operator*(extent a, extent b) {
    if (a.is_product() || b.is_product())
      constexpr_fail("shardgraph: extent: a product of more than two dimensions. name a dimension for the product");
    return {a.first, b.first};
  }
};

// A dimension's printed name ("" for none), and an extent's ("heads*head_dim").
constexpr std::string_view dimension_name(const dimension* d) { return d ? d->name.view() : std::string_view{}; }
inline std::string extent_text(extent e) {
  std::string s(dimension_name(e.first));
  if (e.is_product()) s += "*" + std::string(dimension_name(e.second));
  return s;
}

namespace detail {
// An extent's size where it is fixed at compile time (dim::fixed<5>, or a product of two), else 0.
constexpr std::int64_t fixed_size(extent e) {
  if (e.first == nullptr || e.first->fixed <= 0) return 0;
  if (!e.is_product()) return e.first->fixed;
  return e.second->fixed > 0 ? e.first->fixed * e.second->fixed : 0;
}
}  // namespace detail

// The dimensions users write in shapes: `{dim::batch, dim::seq, dim::model}`.
namespace dim {
inline constexpr extent batch{&detail::builtin_dimension<size_symbol::batch>};
inline constexpr extent seq{&detail::builtin_dimension<size_symbol::seq>};
inline constexpr extent model{&detail::builtin_dimension<size_symbol::model>};
inline constexpr extent ffn{&detail::builtin_dimension<size_symbol::ffn>};
inline constexpr extent vocab{&detail::builtin_dimension<size_symbol::vocab>};
inline constexpr extent heads{&detail::builtin_dimension<size_symbol::heads>};
inline constexpr extent kv_heads{&detail::builtin_dimension<size_symbol::kv_heads>};
inline constexpr extent head_dim{&detail::builtin_dimension<size_symbol::head_dim>};
inline constexpr extent positions{&detail::builtin_dimension<size_symbol::positions>};
inline constexpr extent one{&detail::builtin_dimension<size_symbol::one>};
// A dimension of the user's: `dim::named<"experts">`, sized at bind by `sizes.set("experts", n)`.
template <fixed_string Name>
inline constexpr extent named{&detail::named_dimension<Name>};
// A dimension whose size is fixed at compile time: `dim::fixed<16>`, needing no size at bind.
template <std::int64_t Size>
inline constexpr extent fixed{&detail::fixed_dimension<Size>};
}  // namespace dim

}  // namespace shardgraph
