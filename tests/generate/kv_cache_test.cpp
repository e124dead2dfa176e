#include "shardgraph/generate/kv_cache_size.hpp"

#include <cstdint>
#include <set>
#include <vector>

#include "catch.hpp"
#include "shardgraph/core/memory_size.hpp"
#include "shardgraph/generate/block_pool.hpp"
#include "shardgraph/generate/block_tables.hpp"

namespace generate = shardgraph::generate;
using shardgraph::testing::ContainsSubstring;
using shardgraph::testing::error_of;

namespace {

// 2 (k, v) x 2 layers x 2 kv heads x 4 head_dim x 4 bytes = 128 bytes a token, 2048 a block.
constexpr generate::kv_cache_shape small_shape{.layers = 2,
                                               .local_kv_heads = 2,
                                               .head_dim = 4,
                                               .dtype_bytes = 4,
                                               .max_positions = 1024,
                                               .block_tokens = 16};

}  // namespace

TEST_CASE("the budget is bytes, a size with a unit, or a share of the free memory", "[generate]") {
  CHECK(generate::parse_kv_memory("4GiB").bytes == (std::int64_t{4} << 30));
  CHECK(generate::parse_kv_memory("512MiB").bytes == (std::int64_t{512} << 20));
  CHECK(generate::parse_kv_memory("123456").bytes == 123456);
  CHECK(generate::parse_kv_memory("90%").fraction == Approx(0.9));
  CHECK(generate::parse_kv_memory("90%").of(1000) == 900);
  CHECK_THAT(
      error_of([] { generate::parse_kv_memory("lots"); }),
      ContainsSubstring("shardgraph: kv cache: --kv-memory: 'lots' is not a memory size. give bytes with a "
                        "unit (40GiB, 512MiB, 40GB) or a share of the free memory (90%)"));
  CHECK_THAT(error_of([] { generate::parse_kv_memory("0MiB"); }), ContainsSubstring("not a positive size"));
}

TEST_CASE("blocks = budget / (block tokens x bytes per token), and the report says so", "[generate]") {
  CHECK(small_shape.bytes_per_token() == 128);
  const auto size = generate::size_kv_cache(small_shape, generate::parse_kv_memory("1MiB"), 0);
  CHECK(size.blocks == 512);
  CHECK(size.tokens() == 8192);
  CHECK(size.describe() ==
        "kv cache: 512 blocks of 16 tokens (8192 tokens) per rank in 1048576 bytes (1.00 MiB), 128 bytes per "
        "token (2 x 2 layers x 2 kv heads x 4 head_dim x 4 bytes)");
  // A share of the free memory; the remainder of a block is left out.
  CHECK(generate::size_kv_cache(small_shape, {.fraction = 0.5}, 10'000 * 2048 + 100).blocks == 5000);

  // The header's example: GPT-2 small in bf16 with 1 GiB.
  const auto gpt2 = generate::size_kv_cache(
      {.layers = 12, .local_kv_heads = 12, .head_dim = 64, .dtype_bytes = 2, .max_positions = 1024},
      generate::parse_kv_memory("1GiB"), 0);
  CHECK(gpt2.describe() ==
        "kv cache: 1820 blocks of 16 tokens (29120 tokens) per rank in 1073479680 bytes (1023.75 MiB), 36864 "
        "bytes per token (2 x 12 layers x 12 kv heads x 64 head_dim x 2 bytes)");
}

TEST_CASE("a budget too small for one sequence of the model's length says how much is needed", "[generate]") {
  // 1024 positions need 64 blocks of 2048 bytes = 128 KiB; 100000 bytes hold 48.
  CHECK(error_of([] { generate::size_kv_cache(small_shape, {.bytes = 100'000}, 0); }) ==
        "shardgraph: kv cache: a budget of 100000 bytes (0.10 MiB) holds 48 blocks of 16 tokens, but one "
        "sequence "
        "of the model's 1024 positions needs 64 blocks, 131072 bytes (0.12 MiB) per rank at 128 bytes per "
        "token. "
        "give at least that much (--kv-memory 1MiB), or spread the kv heads over more tp ranks");
  CHECK_NOTHROW(generate::size_kv_cache(small_shape, {.bytes = 131'072}, 0));
  CHECK_THAT(error_of([] { generate::size_kv_cache(small_shape, {.fraction = 0.9}, 0); }),
             ContainsSubstring("kv cache: a budget of 90.000000% of the free memory, but 0 bytes are free"));
  auto no_heads = small_shape;
  no_heads.local_kv_heads = 0;
  CHECK_THAT(error_of([&] { generate::size_kv_cache(no_heads, {.bytes = 1 << 20}, 0); }),
             ContainsSubstring("kv cache: local_kv_heads is 0, not a positive size"));
}

TEST_CASE("the pool hands out each block once and takes each back once", "[generate]") {
  generate::block_pool pool(3);
  CHECK(pool.allocate() == 0);
  CHECK(pool.allocate() == 1);
  CHECK(pool.allocate() == 2);
  CHECK(pool.allocate() == -1);
  pool.release(1);
  CHECK(pool.free_count() == 1);
  CHECK(pool.allocate() == 1);
  pool.release(2);
  CHECK_THAT(error_of([&] { pool.release(2); }),
             ContainsSubstring("kv cache: block_pool::release: block 2 is not held"));
  CHECK_THAT(error_of([] { generate::block_pool empty(0); }), ContainsSubstring("0 blocks"));
}

TEST_CASE("block tables allocate a block at each block boundary and free them all on release", "[generate]") {
  generate::block_tables tables(generate::kv_cache_size{{.layers = 1,
                                                         .local_kv_heads = 1,
                                                         .head_dim = 1,
                                                         .dtype_bytes = 1,
                                                         .max_positions = 64,
                                                         .block_tokens = 4},
                                                        5});
  CHECK(tables.append_token(7));  // token 0: block 0
  CHECK(tables.table(7).size() == 1);
  CHECK(tables.append_tokens(7, 3));  // tokens 1-3 fill block 0
  CHECK(tables.pool().free_count() == 4);
  CHECK(tables.append_token(7));      // token 4 opens block 1
  CHECK(tables.append_tokens(9, 6));  // two blocks: 2, 3
  CHECK(std::vector<generate::block_id>(tables.table(7).begin(), tables.table(7).end()) ==
        std::vector<generate::block_id>{0, 1});
  CHECK(std::vector<generate::block_id>(tables.table(9).begin(), tables.table(9).end()) ==
        std::vector<generate::block_id>{2, 3});
  CHECK(tables.room(7) == 3 + 4);           // three slots left in block 1, and block 4
  CHECK_FALSE(tables.append_tokens(9, 7));  // 2 slots in block 3 + 4 in block 4: one short
  CHECK(tables.tokens(9) == 6);             // all or nothing
  CHECK(tables.describe().ends_with("; 1 of 5 blocks free"));
  tables.release(7);
  tables.release(9);
  CHECK(tables.pool().free_count() == 5);
  CHECK(tables.table(7).empty());
}
