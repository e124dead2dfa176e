#pragma once
// The shape rules of the ops along one dimension (ir/along_dimension.hpp), for ir/shape_rules.hpp:
//   concat      parts (..., n_k, ...) of one rank and dtype -> (..., out_dim, ...), out_dim the node's
//   slice       x (..., n, ...) -> (..., size, ...); offset + size <= n
//   slice_grad  dy (..., size, ...) -> the node's shape (x's), equal but along dim
//   sum, mean   x (d0, ..., d[r-1]) -> x without dimension dim
//   broadcast   x -> the node's shape, which is x with dimension dim inserted
// Sizes fixed at compile time (dim::fixed<5>) are checked here; the others at bind
// (runtime/along_dimension_checks.hpp).
#include <cstdint>

#include "shardgraph/ir/graph.hpp"
#include "shardgraph/ir/shape_text.hpp"

namespace shardgraph {

namespace detail {

// x without its dimension dim.
constexpr shape without_dimension(const shape& x, int dim) {
  shape out;
  for (int k = 0; k < x.rank(); ++k)
    if (k != dim) out.dims.push_back(x[k]);
  return out;
}

// a and b are equal but along dimension dim (both of one rank).
constexpr bool equal_but_along(const shape& a, const shape& b, int dim) {
  if (a.rank() != b.rank()) return false;
  for (int k = 0; k < a.rank(); ++k)
    if (k != dim && !(a[k] == b[k])) return false;
  return true;
}

constexpr bool along_dimension_fails(graph_ref g, int i, const shape& x, std::string_view why,
                                     std::string_view how) {
  if (diagnostic* d = g.report(i)) *d << why << ": x " << x << ". " << how;
  return false;
}

constexpr bool concat_shape(graph_ref g, int i, shape& out) {
  const node& n = g[i];
  const int dim = n.along.dim;
  const shape& first = g[n.inputs[0]].shape;
  if (n.input_count < 2 || n.input_count > 4)
    return along_dimension_fails(g, i, first, "takes 2 to 4 parts",
                                 "concat the first parts into one, naming its dimension, then the rest");
  if (dim < 0 || dim >= first.rank())
    return along_dimension_fails(g, i, first, "joins along a dimension the parts do not have",
                                 "give an axis in [-rank, rank) of the parts");
  std::int64_t fixed_sum = 0;
  for (int k = 0; k < n.input_count; ++k) {
    const node& part = g[n.inputs[k]];
    if (!equal_but_along(first, part.shape, dim) || part.type != g[n.inputs[0]].type) {
      if (diagnostic* d = g.report(i))
        *d << "the parts differ in rank, dtype or a dimension other than " << dim << ": part 0 " << first
           << ", part " << k << " " << part.shape
           << ". give the parts one dtype and equal dimensions but the one they are joined along";
      return false;
    }
    const std::int64_t size = fixed_size(part.shape[dim]);
    fixed_sum = (fixed_sum < 0 || size == 0) ? -1 : fixed_sum + size;
  }
  out = first;
  out[dim] = n.shape[dim];
  const std::int64_t named = fixed_size(out[dim]);
  if (fixed_sum > 0 && named > 0 && fixed_sum != named) {
    if (diagnostic* d = g.report(i))
      *d << "the parts' sizes along dimension " << dim << " add up to " << static_cast<int>(fixed_sum)
         << ", not the result's " << static_cast<int>(named) << ": part 0 " << first << ", result " << out
         << ". name the result's dimension dim::fixed<" << static_cast<int>(fixed_sum) << ">";
    return false;
  }
  return true;
}

// slice, and a concat's gradient (a slice whose offset bind finds from the concat's parts).
constexpr bool slice_shape(graph_ref g, int i, const shape& x, shape& out) {
  const node& n = g[i];
  const int dim = n.along.dim;
  if (dim < 0 || dim >= x.rank() || n.shape.rank() != x.rank())
    return along_dimension_fails(g, i, x, "slices along a dimension x does not have",
                                 "give an axis in [-rank, rank) of x");
  out = x;
  out[dim] = n.shape[dim];
  const std::int64_t offset_fixed = n.slice_after ? n.slice_after->fixed : 0;
  const bool offset_known = !n.slice_after || offset_fixed > 0;
  const std::int64_t size = fixed_size(out[dim]), whole = fixed_size(x[dim]);
  if (n.slice_offset < 0)
    return along_dimension_fails(g, i, x, "starts at a negative offset, or after a product of dimensions",
                                 "give an offset of at least 0, or one dimension (name one for a product)");
  const std::int64_t start = n.slice_offset + offset_fixed;
  if (n.along.part < 0 && offset_known && size > 0 && whole > 0 && start + size > whole) {
    if (diagnostic* d = g.report(i))
      *d << "the slice [" << static_cast<int>(start) << ", " << static_cast<int>(start + size)
         << ") along dimension " << dim
         << " ends past x's " << static_cast<int>(whole) << ": x " << x << ", result " << out
         << ". start the slice earlier or take fewer elements";
    return false;
  }
  return true;
}

constexpr bool along_dimension_shape(graph_ref g, int i, shape& out) {
  const node& n = g[i];
  const shape& x = g[n.inputs[0]].shape;
  const int dim = n.along.dim;
  switch (n.kind) {
    case op::concat:
      return concat_shape(g, i, out);
    case op::slice:
      return slice_shape(g, i, x, out);
    case op::sum:
    case op::mean:
      if (dim < 0 || dim >= x.rank())
        return along_dimension_fails(g, i, x, "reduces a dimension x does not have",
                                     "give an axis in [-rank, rank) of x");
      out = without_dimension(x, dim);
      return true;
    case op::slice_grad:
      out = n.shape;
      if (dim >= 0 && dim < x.rank() && equal_but_along(x, out, dim)) return true;
      return along_dimension_fails(g, i, x, "dy differs from x but along the sliced dimension",
                                   "this is a bug in autodiff; please report it");
    default:  // broadcast
      out = n.shape;
      if (dim >= 0 && dim < out.rank() && without_dimension(out, dim) == x) return true;
      if (diagnostic* d = g.report(i))
        *d << "the result is not x with dimension " << dim << " inserted: x " << x << ", result " << out
           << ". give an axis in [0, rank] of the result and a result of x's dimensions";
      return false;
  }
}

}  // namespace detail

}  // namespace shardgraph
