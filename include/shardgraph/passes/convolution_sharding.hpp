#pragma once
// The placement signatures of the convolutions' layouts (dsl/convolution.hpp), per mesh axis:
//   patchify, unfold1d     x (batch, channels, ...) -> (batch, windows, channels * window)
//                          S(0) -> S(0); S(1) -> S(2) (the features hold whole channels); a
//                          sharded height, width or length -> R first; R and P pass through
//   unpatchify, fold1d     dy (batch, windows, features) -> the input's shape, the inverse:
//                          S(0) -> S(0); S(2) -> S(1); S(1) (the windows) -> R first; R and P pass
// A layout moves elements and sums none across ranks, so a Partial value stays Partial.
#include "shardgraph/ir/node.hpp"
#include "shardgraph/passes/axis_decision.hpp"

namespace shardgraph::passes::detail {

constexpr axis_decision decide_convolution_layout(const node& n, placement x) {
  axis_decision r;
  const bool forward = n.kind == op::patchify || n.kind == op::unfold1d;
  const int channels = forward ? 1 : 2, features = forward ? 2 : 1;
  if (x.is_shard(channels)) {
    r.need[0] = x;
    r.out = shard_on(features);
  } else if (x.is_shard() && !x.is_shard(0)) {
    r.need[0] = r.out = replicate;
  } else {
    r.need[0] = r.out = x;
  }
  return r;
}

}  // namespace shardgraph::passes::detail
