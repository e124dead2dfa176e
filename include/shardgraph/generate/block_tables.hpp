#pragma once
// block_tables: each sequence's map from logical block to physical block of the paged KV cache,
// over one block_pool.
//
// Position p of sequence s lives in physical block table(s)[p / block_tokens], at slot
// p % block_tokens: the cache slot table(s)[p / block_tokens] * block_tokens + p % block_tokens.
// Appending tokens allocates a block at each block boundary (token 0, 16, 32, ... with 16 tokens
// a block); release() gives every block of a finished or preempted sequence back to the pool.
//
//   block_tables tables(size);           // size: kv_cache_size (blocks and block_tokens)
//   tables.append_tokens(7, 20);         // sequence 7 holds 20 tokens: blocks {0, 1}
//   tables.table(7)                      // {0, 1}
//   tables.release(7);                   // pool back to full
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/generate/block_pool.hpp"
#include "shardgraph/generate/kv_cache_size.hpp"

namespace shardgraph::generate {

using sequence_id = std::int64_t;

class block_tables {
 public:
  explicit block_tables(const kv_cache_size& size) : size_(size), pool_(size.blocks) {}

  std::int64_t block_tokens() const { return size_.shape.block_tokens; }
  const block_pool& pool() const { return pool_; }
  const kv_cache_size& size() const { return size_; }

  // Tokens of sequence s that have a slot (0 for a sequence the tables do not hold).
  std::int64_t tokens(sequence_id s) const {
    const auto it = sequences_.find(s);
    return it == sequences_.end() ? 0 : it->second.tokens;
  }
  // Physical block of each logical block of s, in order; empty for a sequence not held.
  std::span<const block_id> table(sequence_id s) const {
    const auto it = sequences_.find(s);
    if (it == sequences_.end()) return {};
    return it->second.blocks;
  }

  // How many more tokens s could take now: the free slots of its last block and of the free blocks.
  std::int64_t room(sequence_id s) const {
    const auto it = sequences_.find(s);
    const std::int64_t slack = it == sequences_.end() ? 0 : held_slots(it->second) - it->second.tokens;
    return slack + pool_.free_count() * block_tokens();
  }

  // Gives s slots for `count` more tokens, allocating blocks as it crosses block boundaries; all
  // or nothing: false, with nothing changed, when the pool has too few free blocks.
  bool append_tokens(sequence_id s, std::int64_t count) {
    if (count < 0)
      fail("kv cache: append_tokens", "a count of " + std::to_string(count) + " tokens",
           "append zero or more tokens");
    if (count > room(s)) return false;
    entry& e = sequences_[s];
    e.tokens += count;
    while (held_slots(e) < e.tokens) e.blocks.push_back(pool_.allocate());
    return true;
  }
  bool append_token(sequence_id s) { return append_tokens(s, 1); }

  // Gives every block of s back to the pool; s is no longer held (a no-op for a sequence not held).
  void release(sequence_id s) {
    const auto it = sequences_.find(s);
    if (it == sequences_.end()) return;
    for (const block_id b : it->second.blocks) pool_.release(b);
    sequences_.erase(it);
  }

  // The report line: the pool's size and how much of it is in use.
  std::string describe() const {
    return size_.describe() + "; " + std::to_string(pool_.free_count()) + " of " +
           std::to_string(pool_.total()) + " blocks free";
  }

 private:
  struct entry {
    std::vector<block_id> blocks;
    std::int64_t tokens = 0;
  };
  std::int64_t held_slots(const entry& e) const {
    return static_cast<std::int64_t>(e.blocks.size()) * block_tokens();
  }

  kv_cache_size size_;
  block_pool pool_;
  std::unordered_map<sequence_id, entry> sequences_;
};

}  // namespace shardgraph::generate
