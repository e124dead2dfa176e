#pragma once
// The kernel dims of the ops along one dimension d (compute/compute_backend.hpp's table), on one
// rank: a tensor is seen as (outer, n, inner), outer the product of its local dims before d,
// inner of those after.
//   concat      {outer, inner, n0, n1, n2, n3}     the parts' n (0 past the last part)
//   slice       {outer, n, inner, start, size}     x (outer, n, inner) -> (outer, size, inner)
//   slice_grad  {outer, n, inner, start, size}     dy (outer, size, inner) -> (outer, n, inner)
//   sum, mean   {outer, n, inner, divisor}         x (outer, n, inner) -> (outer, inner)
//   broadcast   {outer, n, inner, divisor}         x (outer, inner) -> (outer, n, inner)
// A sliced dimension is whole on every rank (propagate_sharding gathers it), so start is global.
// A mean's divisor is d's global size (a rank holding a slice of it adds a Partial share), 1 for
// a sum; a broadcast divides by its dimension's global size where it is a mean's gradient.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/along_dimension_checks.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph::plan::detail {

inline std::array<std::int64_t, 6> along_dimension_dims(const program_view& p, const local_layout& layout,
                                                        const model_sizes& sizes, int i) {
  const node& n = p.nodes[i];
  const std::size_t d = static_cast<std::size_t>(n.along.dim);
  // The tensor that has dimension d: the result for concat, slice_grad and broadcast, else x.
  const bool result_has_d = n.kind == op::concat || n.kind == op::slice_grad || n.kind == op::broadcast;
  const local_dims& t = layout.of(result_has_d ? i : n.inputs[0]);
  const std::span<const std::int64_t> dims(t.local);
  const std::int64_t outer = checked_product(dims.first(d), "executor: kernel dims");
  const std::int64_t inner = checked_product(dims.subspan(d + 1), "executor: kernel dims");
  const std::int64_t n_d = t.local[d];
  switch (n.kind) {
    case op::concat: {
      std::array<std::int64_t, 6> r{outer, inner, 0, 0, 0, 0};
      for (int k = 0; k < n.input_count; ++k) r[static_cast<std::size_t>(2 + k)] = layout.of(n.inputs[k]).local[d];
      return r;
    }
    case op::slice:
    case op::slice_grad: {
      const auto global_of = [&](int j) -> const std::vector<std::int64_t>& { return layout.of(j).global; };
      const int sliced = n.kind == op::slice ? i : n.inputs[0];
      return {outer, n_d, inner, slice_start(p.nodes, n, sizes, global_of), layout.of(sliced).local[d], 0};
    }
    case op::mean:
      return {outer, n_d, inner, t.global[d], 0, 0};
    case op::broadcast:
      return {outer, n_d, inner, n.along.mean ? t.global[d] : 1, 0, 0};
    default:  // sum
      return {outer, n_d, inner, 1, 0, 0};
  }
}

}  // namespace shardgraph::plan::detail
