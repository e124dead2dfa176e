#pragma once
// block_pool: the physical blocks of one rank's paged KV cache, each free or held by one sequence.
//
// Blocks are numbered 0 .. total()-1; block b holds the keys and values of the token slots
// [b * block_tokens, (b + 1) * block_tokens) of the cache buffer that the plan owns. A fresh pool
// hands out 0, 1, 2, ...; a released block is the next one handed out (last in, first out), so a
// run's block numbers depend only on the order of allocations and releases.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"

namespace shardgraph::generate {

using block_id = std::int32_t;

class block_pool {
 public:
  explicit block_pool(std::int64_t blocks) {
    if (blocks < 1 || blocks > std::numeric_limits<block_id>::max())
      fail("kv cache: block_pool", std::to_string(blocks) + " blocks",
           "give a pool of 1 to 2^31 - 1 blocks (size_kv_cache computes it from the budget)");
    held_.assign(static_cast<std::size_t>(blocks), false);
    free_.reserve(static_cast<std::size_t>(blocks));
    for (std::int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<block_id>(b));
  }

  std::int64_t total() const { return static_cast<std::int64_t>(held_.size()); }
  std::int64_t free_count() const { return static_cast<std::int64_t>(free_.size()); }
  std::int64_t held_count() const { return total() - free_count(); }

  // A free block, now held; -1 when none is free.
  block_id allocate() {
    if (free_.empty()) return -1;
    const block_id b = free_.back();
    free_.pop_back();
    held_[static_cast<std::size_t>(b)] = true;
    return b;
  }

  void release(block_id b) {
    if (b < 0 || b >= total() || !held_[static_cast<std::size_t>(b)])
      fail("kv cache: block_pool::release", "block " + std::to_string(b) + " is not held",
           "release each block once, after allocate() returned it");
    held_[static_cast<std::size_t>(b)] = false;
    free_.push_back(b);
  }

 private:
  std::vector<bool> held_;
  std::vector<block_id> free_;  // a stack: the top is handed out next
};

}  // namespace shardgraph::generate
