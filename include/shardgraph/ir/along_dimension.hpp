#pragma once
// What the ops that combine or reduce along one dimension carry (node::along): concat, slice and
// its gradient slice_grad, sum, mean and their gradient broadcast. The extent they give the
// result along that dimension (concat's sum, slice's length, broadcast's new dimension) is the
// node's own shape there, set by the DSL, as `ones` carries its shape.
#include <cstdint>

#include "shardgraph/core/extent.hpp"

namespace shardgraph {

struct along_dimension {
  std::int8_t dim = -1;   // the dimension: of the input (concat, slice, sum, mean), of the result
                          // (slice_grad, broadcast)
  std::int8_t part = -1;  // a slice that is a concat's gradient: which part; node::origin is the
                          // concat, and the slice starts after the parts before this one
  bool mean = false;      // broadcast: divides by the dimension's global size (mean's gradient)
  std::int32_t offset = 0;  // slice, slice_grad: where the slice starts: offset plus the size of
  extent offset_extent;     // offset_extent where it names one (the text after `patches` image tokens)
};

}  // namespace shardgraph
