#pragma once
// slot: what one rank posts when it arrives at a collective. Between the arrival and the departure
// of that collective every rank may read every slot (and the buffers they point to); only the
// owner writes its slot, and only before arriving (or, for fields nobody reads yet, in between).
#include <shardgraph/threads/element_type.hpp>

#include <cstddef>
#include <memory>
#include <string_view>

namespace shardgraph::threads::detail {

class group;

struct slot {
  std::string_view op;     // the collective's name, e.g. "all_gather"
  element_type type = {};  // of both buffers; empty for barrier and split
  const void* in = nullptr;
  std::size_t in_count = 0;  // elements
  void* out = nullptr;
  std::size_t out_count = 0;                 // elements
  int root = 0;                              // broadcast
  int color = 0;                             // split
  int key = 0;                               // split
  std::shared_ptr<group> created = nullptr;  // split: the new group, set by its first member after arrival
};

}  // namespace shardgraph::threads::detail
