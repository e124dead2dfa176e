#pragma once
// Shapes in error messages, spelled as bind spells them: "(batch, seq, heads*head_dim)".
#include "shardgraph/core/shape.hpp"
#include "shardgraph/ir/diagnostic.hpp"

namespace shardgraph {

constexpr diagnostic& operator<<(diagnostic& d, const shape& s) {
  d << "(";
  for (int i = 0; i < s.rank(); ++i) {
    if (i > 0) d << ", ";
    d << dimension_name(s[i].first);
    if (s[i].is_product()) d << "*" << dimension_name(s[i].second);
  }
  return d << ")";
}

}  // namespace shardgraph
