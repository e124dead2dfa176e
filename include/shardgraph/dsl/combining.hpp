#pragma once
// The DSL's ops along one dimension: concat and slice (and split, two slices), sum and mean, and
// broadcast. Extents are symbolic, so a result's size along the dimension is named by the caller
// (concat's out_dim, slice's size); bind checks it against the inputs' sizes, and where every
// size is fixed at compile time (dim::fixed<5>) the graph checks it. An axis may be negative,
// counted from the last (-1 the last). Shapes in comments are global.
#include <array>
#include <cstdint>
#include <initializer_list>

#include "shardgraph/ir/builder.hpp"

namespace shardgraph {

namespace detail {
// A node of kind `kind` reading x along dimension `axis` of a tensor of `rank` dimensions (negative:
// from the last), its shape x's; an axis outside [0, rank) stays out of range for the shape rule.
constexpr node along_node(op kind, tensor x, int axis, int rank) {
  node n;
  n.kind = kind;
  n.inputs[n.input_count++] = x.id;
  n.type = x.builder->value()[x.id].type;
  n.shape = x.builder->value()[x.id].shape;
  if (axis < 0) axis += rank;
  n.along.dim = static_cast<std::int8_t>(axis < 0 || axis > static_cast<int>(max_rank) ? max_rank : axis);
  return n;
}
constexpr int rank_of(tensor x) { return x.builder->value()[x.id].shape.rank(); }
}  // namespace detail

// parts (..., n_k, ...) joined along axis -> (..., out_dim, ...): 2 to 4 parts, equal but along
// axis; out_dim is the sum of the parts' n_k (`concat({cls, patches}, 1, dim::named<"tokens">)`
// with tokens = patches + 1 at bind). Placements: along a dimension no part shards, S and P pass;
// a part sharded along axis is gathered first. Gradient: each part's slice of dy.
constexpr tensor concat(std::initializer_list<tensor> parts, int axis, extent out_dim) {
  const tensor first = *parts.begin();
  node n = detail::along_node(op::concat, first, axis, detail::rank_of(first));
  n.input_count = 0;
  for (tensor part : parts)
    if (n.input_count < max_inputs) n.inputs[n.input_count++] = part.id;
  if (n.along.dim < n.shape.rank()) n.shape[n.along.dim] = out_dim;
  return first.builder->make(n);
}

namespace detail {
constexpr tensor slice_of(tensor x, int axis, std::int64_t offset, extent offset_extent, extent size) {
  node n = along_node(op::slice, x, axis, rank_of(x));
  n.slice_offset = static_cast<std::int32_t>(offset < 0 || offset > INT32_MAX || offset_extent.is_product() ? -1 : offset);
  n.slice_after = offset_extent.first;
  if (n.along.dim < n.shape.rank()) n.shape[n.along.dim] = size;
  return x.builder->make(n);
}
}  // namespace detail

// x (..., n, ...) -> (..., size, ...): the elements [offset, offset + size) along axis, the offset
// a number or a dimension (`slice(x, 1, dim::named<"patches">, dim::seq)`: the text after the image
// tokens; not a product); offset + size <= n, checked at bind. Placements: x sharded along axis is gathered first;
// S elsewhere, R and P pass. Gradient: dy placed in zeros of x's shape (slice_grad).
constexpr tensor slice(tensor x, int axis, std::int64_t offset, extent size) {
  return detail::slice_of(x, axis, offset, extent{}, size);
}
constexpr tensor slice(tensor x, int axis, extent offset, extent size) {
  return detail::slice_of(x, axis, 0, offset, size);
}
// x (..., first + second, ...) -> its first `first` and its last `second` elements along axis.
constexpr std::array<tensor, 2> split(tensor x, int axis, extent first, extent second) {
  return {slice(x, axis, 0, first), slice(x, axis, first, second)};
}

// x (d0, ..., d[r-1]) -> x without dimension axis, summed over it. Placements: x sharded along
// axis gives a Partial result (each rank sums its slice); S elsewhere, R and P pass. Gradient:
// dy broadcast along axis.
constexpr tensor sum(tensor x, int axis) {
  return x.builder->make(detail::along_node(op::sum, x, axis, detail::rank_of(x)));
}
// As sum, divided by the dimension's (global) size.
constexpr tensor mean(tensor x, int axis) {
  return x.builder->make(detail::along_node(op::mean, x, axis, detail::rank_of(x)));
}
// x -> x with a dimension of extent size inserted at axis of the result (in [0, rank of x], or
// negative from the result's last), every element repeated along it. Gradient: dy summed along axis.
constexpr tensor broadcast(tensor x, int axis, extent size) {
  node n = detail::along_node(op::broadcast, x, axis, detail::rank_of(x) + 1);
  const shape& from = x.builder->value()[x.id].shape;
  if (n.along.dim <= from.rank() && from.rank() < static_cast<int>(max_rank)) {
    n.shape = shape{};
    for (int k = 0; k <= from.rank(); ++k)
      n.shape.dims.push_back(k == n.along.dim ? size : from[k < n.along.dim ? k : k - 1]);
  }
  return x.builder->make(n);
}

}  // namespace shardgraph
