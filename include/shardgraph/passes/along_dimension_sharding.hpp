#pragma once
// The placement signatures of the ops along one dimension d (ir/along_dimension.hpp), per mesh
// axis (R Replicate, S(e) Shard<e>, P Partial), for propagate_sharding:
//   concat      parts S(d) -> R first (gathered); then the first S(e) of a part is every part's
//               (an R part is sliced, a P part reduce-scattered) and the result's; all P -> P;
//               otherwise R (a P part is reduced first)
//   slice, slice_grad   S(d) -> R first; R, S(e) and P pass through (a slice is linear)
//   sum, mean   S(d) -> P (each rank sums its slice; mean divides by the global size);
//               S(e) -> S(e - 1) past d; R and P pass
//   broadcast   S(e) -> S(e + 1) from d on; R and P pass
#include "shardgraph/ir/graph.hpp"
#include "shardgraph/passes/axis_decision.hpp"

namespace shardgraph::passes::detail {

constexpr axis_decision decide_concat(const node& n, const placement* in) {
  const int d = n.along.dim;
  placement target = replicate;
  bool all_partial = true;
  for (int k = 0; k < n.input_count; ++k) {
    const placement p = in[k].is_shard(d) ? replicate : in[k];
    if (p.is_shard() && !target.is_shard()) target = p;
    all_partial = all_partial && p.is_partial();
  }
  if (all_partial) target = partial;
  axis_decision r;
  for (int k = 0; k < n.input_count; ++k) r.need[k] = target;
  r.out = target;
  return r;
}

constexpr axis_decision decide_along_dimension(const node& n, const placement* in) {
  if (n.kind == op::concat) return decide_concat(n, in);
  const int d = n.along.dim;
  const placement x = in[0];
  axis_decision r;
  r.need[0] = r.out = x;
  switch (n.kind) {
    case op::sum:
    case op::mean:
      if (x.is_shard(d)) r.out = partial;
      else if (x.is_shard() && x.dim > d) r.out = shard_on(x.dim - 1);
      break;
    case op::broadcast:
      if (x.is_shard() && x.dim >= d) r.out = shard_on(x.dim + 1);
      break;
    default:  // slice, slice_grad
      if (x.is_shard(d)) r.need[0] = r.out = replicate;
      break;
  }
  return r;
}

}  // namespace shardgraph::passes::detail
