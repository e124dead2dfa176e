#pragma once
// A generation program's kv_context (passes/attach_kv_cache.hpp), as every backend reads it:
//   kv_context (batch, table) i32, row b = [L_b, block ids...]: L_b tokens are in row b's cache
//   after the step, so the step's token t sits at position L_b - seq + t; position p lives in
//   block row[1 + p / block_tokens], row p % block_tokens of that block (keys; values
//   block_tokens rows further).
// check_kv_context runs on the host before a step (runtime/executor_io.hpp), so kernels index the
// cache without checks of their own.
#include <cstdint>
#include <string>

#include "shardgraph/core/error.hpp"

namespace shardgraph::compute {

struct kv_context_sizes {
  std::int64_t batch = 0, seq = 0, table = 0;  // kv_context (batch, table); the step's seq
  std::int64_t block_tokens = 0, blocks = 0;   // the cache's block size, and the blocks of the pool
};

// Fails, naming `where`, where a row caches fewer tokens than the step brings, needs more blocks
// than its table has columns, or names a block outside [0, blocks).
inline void check_kv_context(const std::int32_t* context, const kv_context_sizes& s, const std::string& where) {
  for (std::int64_t b = 0; b < s.batch; ++b) {
    const std::int32_t* row = context + b * s.table;
    const std::string which = "row " + std::to_string(b) + " of kv_context";
    if (row[0] < s.seq)
      fail(where,
           which + " says " + std::to_string(row[0]) + " tokens are cached after this step, fewer than the step's " +
               std::to_string(s.seq),
           "set kv_context[b][0] to the tokens cached before the step plus the step's length");
    const std::int64_t needed = (row[0] + s.block_tokens - 1) / s.block_tokens;
    if (needed > s.table - 1)
      fail(where,
           which + " needs " + std::to_string(needed) + " cache blocks for " + std::to_string(row[0]) +
               " tokens, but kv_context has " + std::to_string(s.table - 1) + " block columns",
           "bind with a larger kv_table (set_kv_cache_sizes' max_blocks)");
    for (std::int64_t k = 1; k <= needed; ++k)
      if (row[k] < 0 || row[k] >= s.blocks)
        fail(where,
             which + " names cache block " + std::to_string(row[k]) + ", but this rank holds " +
                 std::to_string(s.blocks),
             "give block ids in [0, kv_blocks / data-parallel ranks), local to the rank's pool");
  }
}

// The position of row b's first token in the step.
inline std::int64_t kv_first_position(const std::int32_t* context, std::int64_t b, std::int64_t seq,
                                      std::int64_t table) {
  return context[b * table] - seq;
}

// Where position p of row b starts in the cache (blocks, kv_heads, 2 block_tokens, head_dim): its
// key row, for kv head `head`.
inline std::int64_t kv_cache_row(const std::int32_t* context, std::int64_t table, std::int64_t b, std::int64_t p,
                                 std::int64_t head, std::int64_t kv_heads, std::int64_t block_tokens,
                                 std::int64_t head_dim) {
  const std::int64_t block = context[b * table + 1 + p / block_tokens];
  return ((block * kv_heads + head) * 2 * block_tokens + p % block_tokens) * head_dim;
}

}  // namespace shardgraph::compute
