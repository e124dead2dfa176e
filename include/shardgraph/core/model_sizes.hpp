#pragma once
// Run-time values of the size symbols (DESIGN §3: compile time fixes structure, bind fixes sizes).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/extent.hpp"

namespace shardgraph {

struct model_sizes {
  std::int64_t values[size_symbol_count]{};
  // The sizes of the user's dimensions (dim::named<"experts">), by name.
  std::vector<std::pair<std::string, std::int64_t>> named;
  // The real number of classes of a padded vocabulary: a cross_entropy over logits whose last
  // dimension is `vocab` takes only the first `classes` columns as classes (the rest is padding,
  // masked out of the softmax), and token ids and targets must lie in [0, classes). 0: no padding
  // (classes = vocab).
  std::int64_t classes = 0;

  model_sizes() { values[static_cast<int>(size_symbol::one)] = 1; }
  model_sizes& set(size_symbol s, std::int64_t v) {
    values[static_cast<int>(s)] = v;
    return *this;
  }
  // A dimension's size by its name: a user's (`set("experts", 8)` sizes dim::named<"experts">) or
  // a built-in's (`set("model", 64)` is set(size_symbol::model, 64)).
  model_sizes& set(std::string_view name, std::int64_t v) {
    if (builtin_symbol(name) != size_symbol::none) return set(builtin_symbol(name), v);
    for (auto& [n, size] : named)
      if (n == name) {
        size = v;
        return *this;
      }
    named.emplace_back(name, v);
    return *this;
  }
  std::int64_t get(size_symbol s) const {
    std::int64_t v = values[static_cast<int>(s)];
    if (v <= 0)
      fail("bind", "size '" + std::string(symbol_name(s)) + "' is " + std::to_string(v),
           "give every size of the model config a positive value");
    return v;
  }
  // A dimension's size: a built-in's from its slot, a fixed one's own, a user's by its name.
  std::int64_t get(const dimension* d) const {
    if (d == nullptr || d->builtin != size_symbol::none) return get(d ? d->builtin : size_symbol::none);
    if (d->fixed > 0) return d->fixed;
    const std::string name(d->name.view());
    for (const auto& [n, v] : named)
      if (n == name) {
        if (v <= 0)
          fail("bind", "dimension '" + name + "' has size " + std::to_string(v),
               "give it a positive size: sizes.set(\"" + name + "\", n)");
        return v;
      }
    fail("bind", "dimension '" + name + "' (dim::named<\"" + name + "\">) has no size",
         "give it one before bind: sizes.set(\"" + name + "\", n)");
  }
  // A product extent's value, refused (naming both sizes) when it exceeds 64 bits.
  std::int64_t get(extent e) const {
    if (!e.is_product()) return get(e.first);
    return checked_multiply(get(e.first), get(e.second), "bind: size '" + extent_text(e) + "'");
  }

  // The classes of a dimension of `rows` entries (global) whose extent is e: `classes` for a
  // padded vocabulary, else all of them. Throws unless 0 < classes <= vocab.
  std::int64_t classes_of(extent e, std::int64_t rows) const {
    if (classes == 0 || e != dim::vocab) return rows;
    if (classes < 0 || classes > rows)
      fail("bind", "classes = " + std::to_string(classes) + " is not in [1, vocab = " + std::to_string(rows) + "]",
           "give the real vocabulary size as classes and the padded one as vocab (0: no padding)");
    return classes;
  }
};

}  // namespace shardgraph
