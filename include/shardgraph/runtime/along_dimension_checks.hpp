#pragma once
// The bind-time checks of the ops along one dimension (ir/along_dimension.hpp), on global sizes:
// a concat's result is as long as its parts together, and a slice [start, start + size) lies in
// its input. Sizes fixed at compile time were checked when the graph was built
// (ir/along_dimension_shapes.hpp); these catch the ones named and sized at bind.
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/ir/graph.hpp"

namespace shardgraph {

// Where a slice (or slice_grad) starts along its dimension, globally: its offset plus its offset
// extent's size, or for a concat's gradient the size of the concat's parts before its own.
// global_of(j) is node j's global dims.
template <class GlobalOf>
std::int64_t slice_start(const graph_view& g, const node& n, const model_sizes& sizes, const GlobalOf& global_of) {
  const std::size_t dim = static_cast<std::size_t>(n.along.dim);
  std::int64_t start = n.slice_offset;
  if (n.along.part >= 0)
    for (int k = 0; k < n.along.part; ++k) start += global_of(g[n.origin].inputs[k])[dim];
  else if (n.slice_after != nullptr)
    start += sizes.get(n.slice_after);
  return start;
}

// Throws, naming node i, where its sizes along its dimension do not fit.
template <class GlobalOf>
void check_along_dimension(const graph_view& g, int i, const model_sizes& sizes, const GlobalOf& global_of,
                           const std::string& where) {
  const node& n = g[i];
  const std::size_t dim = static_cast<std::size_t>(n.along.dim);
  const extent named = n.shape[n.along.dim];
  if (n.kind == op::concat) {
    std::int64_t total = 0;
    std::string terms;
    for (int k = 0; k < n.input_count; ++k) {
      const std::int64_t part = global_of(n.inputs[k])[dim];
      total += part;
      terms += (k ? " + " : "") + std::to_string(part);
    }
    const std::int64_t result = global_of(i)[dim];
    if (total != result)
      fail(where,
           "the parts' sizes along dimension " + std::to_string(dim) + " add up to " + std::to_string(total) +
               " (" + terms + "), but the result's " + extent_text(named) + " is " + std::to_string(result),
           "size " + extent_text(named) + " as the parts' sum: sizes.set(\"" + extent_text(named) + "\", " +
               std::to_string(total) + ")");
  }
  if (n.kind == op::slice && n.along.part < 0) {
    const std::int64_t start = slice_start(g, n, sizes, global_of);
    const std::int64_t whole = global_of(n.inputs[0])[dim], size = global_of(i)[dim];
    if (start + size > whole)
      fail(where,
           "the slice [" + std::to_string(start) + ", " + std::to_string(start + size) + ") along dimension " +
               std::to_string(dim) + " ends past x's " + std::to_string(whole),
           "start the slice earlier or take fewer elements (its size is " + extent_text(named) + ")");
  }
}

}  // namespace shardgraph
