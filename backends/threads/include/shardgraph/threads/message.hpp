#pragma once
// message: a point-to-point send, copied so that the sender can return before the receiver posts
// its recv. Matched by (source, tag), in the order sent.
#include <shardgraph/threads/element_type.hpp>

#include <cstddef>
#include <vector>

namespace shardgraph::threads::detail {

struct message {
  int source = 0;  // group rank of the sender
  int tag = 0;
  element_type type = {};
  std::size_t count = 0;              // elements
  std::vector<std::byte> bytes = {};  // (count * sizeof(element))
};

}  // namespace shardgraph::threads::detail
