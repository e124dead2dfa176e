#pragma once
// axis_decision: what propagate_sharding decides for one node on one mesh axis.
#include "shardgraph/ir/node.hpp"
#include "shardgraph/mesh/placement.hpp"

namespace shardgraph::passes::detail {

struct axis_decision {
  placement out;
  placement need[max_inputs];
  const char* conflict = nullptr;  // "why. how" when the annotations cannot be reconciled
};

}  // namespace shardgraph::passes::detail
