#pragma once
// What the ops that combine or reduce along one dimension carry: concat, slice and its gradient
// slice_grad, sum, mean and their gradient broadcast. node::along says along which dimension;
// a slice's start is node::slice_offset plus the size of node::slice_after where it names a
// dimension. The extent they give the result along that dimension (concat's sum, slice's length,
// broadcast's new dimension) is the node's own shape there, set by the DSL, as `ones` carries its
// shape. The fields are small and sit in the node's padding: every pass copies every node.
#include <cstdint>

namespace shardgraph {

struct along_dimension {
  std::int8_t dim = -1;   // the dimension: of the input (concat, slice, sum, mean), of the result
                          // (slice_grad, broadcast)
  std::int8_t part = -1;  // a slice that is a concat's gradient: which part; node::origin is the
                          // concat, and the slice starts after the parts before this one
  bool mean = false;      // broadcast: divides by the dimension's global size (mean's gradient)
};

}  // namespace shardgraph
