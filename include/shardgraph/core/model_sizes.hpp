#pragma once
// Run-time values of the size symbols (DESIGN §3: compile time fixes structure, bind fixes sizes).
#include <cstdint>
#include <string>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/extent.hpp"

namespace shardgraph {

struct model_sizes {
  std::int64_t values[size_symbol_count]{};
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
  std::int64_t get(size_symbol s) const {
    std::int64_t v = values[static_cast<int>(s)];
    if (v <= 0)
      fail("bind", "size '" + std::string(symbol_name(s)) + "' is " + std::to_string(v),
           "give every size of the model config a positive value");
    return v;
  }
  // A product extent's value, refused (naming both sizes) when it exceeds 64 bits.
  std::int64_t get(extent e) const {
    if (!e.is_product()) return get(e.first);
    return checked_multiply(
        get(e.first), get(e.second),
        "bind: size '" + std::string(symbol_name(e.first)) + "*" + std::string(symbol_name(e.second)) + "'");
  }

  // The classes of a dimension of `rows` entries (global) whose extent is e: `classes` for a
  // padded vocabulary, else all of them. Throws unless 0 < classes <= vocab.
  std::int64_t classes_of(extent e, std::int64_t rows) const {
    if (classes == 0 || e != extent{size_symbol::vocab}) return rows;
    if (classes < 0 || classes > rows)
      fail("bind", "classes = " + std::to_string(classes) + " is not in [1, vocab = " + std::to_string(rows) + "]",
           "give the real vocabulary size as classes and the padded one as vocab (0: no padding)");
    return classes;
  }
};

}  // namespace shardgraph
