#pragma once
// kv_cache_size: how many blocks of the paged KV cache one rank's memory budget holds.
//
// A token's keys and values take, on each rank,
//
//   bytes per token = 2 (k and v) x layers x local kv heads x head_dim x dtype bytes
//
// (local kv heads: the kv heads this rank's attention holds; tp shards them, and a grouped-query
// model with fewer kv heads than tp ranks replicates them, as Megatron does). The cache is cut into
// blocks of `block_tokens` tokens (16, as vLLM), so
//
//   blocks = budget / (block_tokens x bytes per token)          (rounded down)
//
// The budget is bytes ("4GiB", "512MiB", 123456) or a share of the free memory the caller reads
// from its device ("90%", memory_amount{.fraction = 0.9}). A budget that cannot hold one sequence
// of the model's max_positions fails, saying how much is needed:
//
//   const auto size = size_kv_cache({.layers = 12, .local_kv_heads = 12, .head_dim = 64,
//                                    .dtype_bytes = 2, .max_positions = 1024},
//                                   parse_kv_memory("1GiB"), /*free_bytes=*/0);
//   size.describe()  ->  "kv cache: 1820 blocks of 16 tokens (29120 tokens) per rank in
//                         1073479680 bytes (1023.75 MiB), 36864 bytes per token (2 x 12 layers x
//                         12 kv heads x 64 head_dim x 2 bytes)"            (one line)
#include <cstdint>
#include <string>
#include <string_view>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/memory_size.hpp"
#include "shardgraph/runtime/memory_budget.hpp"

namespace shardgraph::generate {

// What one rank's cache stores per token, and the longest sequence it must hold.
struct kv_cache_shape {
  std::int64_t layers = 0;  // on pipeline stages, the stage's own; every stage holds the pool's blocks
  std::int64_t local_kv_heads = 0;  // on this rank
  std::int64_t head_dim = 0;
  std::int64_t dtype_bytes = 0;    // 4 for f32, 2 for bf16 / f16
  std::int64_t max_positions = 0;  // the model's positions: one sequence may hold this many tokens
  std::int64_t block_tokens = 16;

  std::int64_t bytes_per_token() const {
    const char* where = "kv cache: bytes per token";
    return checked_multiply(
        checked_multiply(checked_multiply(2 * layers, local_kv_heads, where), head_dim, where), dtype_bytes,
        where);
  }
  std::int64_t bytes_per_block() const {
    return checked_multiply(block_tokens, bytes_per_token(), "kv cache");
  }
  // Blocks that `tokens` tokens of one sequence take.
  std::int64_t blocks_for(std::int64_t tokens) const { return (tokens + block_tokens - 1) / block_tokens; }
};

struct kv_cache_size {
  kv_cache_shape shape;
  std::int64_t blocks = 0;

  std::int64_t tokens() const { return blocks * shape.block_tokens; }
  std::int64_t bytes() const { return blocks * shape.bytes_per_block(); }

  // One line for bind's report and inspect_layout (the example above).
  std::string describe() const {
    const auto n = [](std::int64_t v) { return std::to_string(v); };
    return "kv cache: " + n(blocks) + " blocks of " + n(shape.block_tokens) + " tokens (" + n(tokens()) +
           " tokens) per rank in " + bytes_text(static_cast<std::size_t>(bytes())) + ", " +
           n(shape.bytes_per_token()) + " bytes per token (2 x " + n(shape.layers) + " layers x " +
           n(shape.local_kv_heads) + " kv heads x " + n(shape.head_dim) + " head_dim x " +
           n(shape.dtype_bytes) + " bytes)";
  }
};

// "4GiB", "512MiB", "123456" (bytes) or "90%" (of the free memory), as `--kv-memory` takes it.
inline memory_amount parse_kv_memory(std::string_view text) {
  return parse_memory_amount(text, "kv cache: --kv-memory", "a share of the free memory (90%)");
}

namespace detail {
inline void check_kv_cache_shape(const kv_cache_shape& s) {
  const auto positive = [](std::int64_t v, const char* name) {
    if (v < 1)
      fail("kv cache", std::string(name) + " is " + std::to_string(v) + ", not a positive size",
           "give the model's sizes on this rank (each at least 1)");
  };
  positive(s.layers, "layers");
  positive(s.local_kv_heads, "local_kv_heads");
  positive(s.head_dim, "head_dim");
  positive(s.dtype_bytes, "dtype_bytes");
  positive(s.max_positions, "max_positions");
  positive(s.block_tokens, "block_tokens");
}

// "6MiB": a whole number of MiB at least `bytes`, as a value for --kv-memory.
inline std::string mebibytes_at_least(std::int64_t bytes) {
  return std::to_string((bytes + (std::int64_t{1} << 20) - 1) >> 20) + "MiB";
}
}  // namespace detail

// `free_bytes`: the device's free memory, which a share is taken of (ignored for a budget in bytes).
inline kv_cache_size size_kv_cache(const kv_cache_shape& shape, const memory_amount& budget,
                                   std::int64_t free_bytes) {
  detail::check_kv_cache_shape(shape);
  if (budget.bytes <= 0 && budget.fraction > 0 && free_bytes <= 0)
    fail("kv cache",
         "a budget of " + std::to_string(budget.fraction * 100) + "% of the free memory, but " +
             std::to_string(free_bytes) + " bytes are free",
         "give the budget in bytes (--kv-memory 4GiB), or pass the device's free bytes");
  const std::int64_t budget_bytes = budget.of(free_bytes);
  const kv_cache_size size{shape, budget_bytes / shape.bytes_per_block()};
  const std::int64_t needed_blocks = shape.blocks_for(shape.max_positions);
  if (size.blocks < needed_blocks) {
    const std::int64_t needed_bytes = needed_blocks * shape.bytes_per_block();
    fail("kv cache",
         "a budget of " + bytes_text(static_cast<std::size_t>(budget_bytes)) + " holds " +
             std::to_string(size.blocks) + " blocks of " + std::to_string(shape.block_tokens) +
             " tokens, but one sequence of the model's " + std::to_string(shape.max_positions) +
             " positions needs " + std::to_string(needed_blocks) + " blocks, " +
             bytes_text(static_cast<std::size_t>(needed_bytes)) + " per rank at " +
             std::to_string(shape.bytes_per_token()) + " bytes per token",
         "give at least that much (--kv-memory " + detail::mebibytes_at_least(needed_bytes) +
             "), or spread the kv heads over more tp ranks");
  }
  return size;
}

}  // namespace shardgraph::generate
