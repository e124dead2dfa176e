#include "shardgraph/data/distributed_sampler.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "catch.hpp"
#include "shardgraph/data/batch_loader.hpp"
#include "shardgraph/data/splitmix64.hpp"
#include "shardgraph/data/token_file.hpp"

namespace data = shardgraph::data;
using shardgraph::host_tensor;
using shardgraph::testing::ContainsSubstring;
using shardgraph::testing::error_of;

namespace {

using ids = std::vector<std::int64_t>;

// A fresh directory per process, so that concurrent test runs do not meet; removed at exit.
std::string temp_path(const std::string& file) {
  static const struct scratch_directory {
    std::filesystem::path path = std::filesystem::temp_directory_path() /
                                 ("shardgraph-data-sampler-test-" + std::to_string(::getpid()));
    scratch_directory() { std::filesystem::create_directories(path); }
    ~scratch_directory() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } directory;
  return (directory.path / file).string();
}

// Token i is i: every window's rows then say where they came from.
struct counting_tokens {
  std::int64_t count;
  std::int64_t size() const { return count; }
  std::int64_t token(std::int64_t i) const { return i; }
};
static_assert(data::token_source<counting_tokens>);
static_assert(data::token_source<data::token_file>);
static_assert(!data::token_source<std::vector<std::int64_t>>);

ids values(const host_tensor& t) {
  const auto v = t.values<std::int64_t>();
  return ids(v.begin(), v.end());
}
// Rows [first, last) of a (rows, seq) tensor, flattened.
ids row_block(const host_tensor& t, std::int64_t first, std::int64_t last) {
  const std::int64_t seq = t.shape()[1];
  const ids all = values(t);
  return ids(all.begin() + first * seq, all.begin() + last * seq);
}

}  // namespace

TEST_CASE("splitmix64 gives the published sequence and unbiased draws in range", "[data]") {
  data::splitmix64 rng(0);
  CHECK(rng.next() == 0xE220A8397B1DCDAFull);
  CHECK(rng.next() == 0x6E789E6AA1B965F4ull);
  CHECK(data::mix64(0) == 0);
  data::splitmix64 draws(99);
  std::vector<int> seen(7, 0);
  for (int i = 0; i < 700; ++i) {
    const auto x = draws.below(7);
    REQUIRE(x < 7);
    ++seen[x];
  }
  for (int n : seen) CHECK(n > 50);
  CHECK(data::splitmix64(5).below(1) == 0);
}

TEST_CASE("window_count cuts n tokens into windows of seq + 1 that share one token", "[data]") {
  CHECK(data::window_count(0, 4) == 0);
  CHECK(data::window_count(1, 4) == 0);
  CHECK(data::window_count(5, 4) == 1);
  CHECK(data::window_count(8, 4) == 1);
  CHECK(data::window_count(9, 4) == 2);
  CHECK(data::window_start(3, 4) == 12);
}

TEST_CASE(
    "distributed_sampler's permutation is the documented splitmix64 Fisher-Yates, the same on every run",
    "[data]") {
  // Computed from the algorithm written in distributed_sampler.hpp by an independent script.
  CHECK(data::distributed_sampler(10, 0, 1, 42).epoch_order(0) == ids{0, 9, 5, 8, 6, 4, 7, 2, 1, 3});
  CHECK(data::distributed_sampler(10, 0, 1, 42).epoch_order(1) == ids{6, 9, 1, 5, 0, 8, 4, 2, 3, 7});
  CHECK(data::distributed_sampler(10, 0, 1, 7).epoch_order(0) == ids{8, 1, 5, 9, 0, 4, 3, 2, 6, 7});

  const data::distributed_sampler a(1000, 2, 4, 1234), b(1000, 2, 4, 1234);
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) CHECK(a.epoch_indices(epoch) == b.epoch_indices(epoch));
  CHECK(a.epoch_indices(0) != data::distributed_sampler(1000, 2, 4, 1235).epoch_indices(0));
}

TEST_CASE("distributed_sampler gives ranks disjoint, equal slices that cover all but the remainder",
          "[data]") {
  const std::int64_t windows = 103;
  const int dp = 4;
  for (const bool shuffle : {true, false}) {
    for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
      std::set<std::int64_t> all;
      for (int r = 0; r < dp; ++r) {
        const data::distributed_sampler sampler(windows, r, dp, 77, shuffle);
        CHECK(sampler.windows_per_rank() == 25);
        const ids mine = sampler.epoch_indices(epoch);
        REQUIRE(mine.size() == 25);
        for (auto w : mine) {
          CHECK((w >= 0 && w < windows));
          CHECK(all.insert(w).second);  // no window on two ranks, nor twice on one
        }
        const ids order = sampler.epoch_order(epoch);
        for (std::size_t j = 0; j < mine.size(); ++j)
          CHECK(mine[j] == order[j * dp + static_cast<std::size_t>(r)]);
      }
      CHECK(all.size() == 100);
      if (!shuffle) CHECK(*all.rbegin() == 99);  // without shuffle the last 3 are the ones dropped
    }
  }
  CHECK(data::distributed_sampler(8, 1, 2, 0, false).epoch_indices(5) == ids{1, 3, 5, 7});
}

TEST_CASE("distributed_sampler shuffles every epoch differently", "[data]") {
  const data::distributed_sampler sampler(500, 0, 2, 9);
  std::set<ids> orders;
  for (std::int64_t epoch = 0; epoch < 5; ++epoch) orders.insert(sampler.epoch_order(epoch));
  CHECK(orders.size() == 5);
  ids sorted = sampler.epoch_order(3);
  std::sort(sorted.begin(), sorted.end());
  ids identity(500);
  for (std::int64_t i = 0; i < 500; ++i) identity[static_cast<std::size_t>(i)] = i;
  CHECK(sorted == identity);  // a permutation
}

TEST_CASE("distributed_sampler rejects bad sizes, ranks and epochs", "[data]") {
  CHECK_THAT(error_of([] { data::distributed_sampler(10, 0, 0, 1); }), ContainsSubstring("dp_size is 0"));
  CHECK_THAT(error_of([] { data::distributed_sampler(10, 2, 2, 1); }),
             ContainsSubstring("dp_rank 2 is outside [0, 2)"));
  CHECK_THAT(error_of([] { data::distributed_sampler(10, -1, 2, 1); }), ContainsSubstring("dp_rank -1"));
  CHECK_THAT(error_of([] { data::distributed_sampler(3, 0, 4, 1); }),
             ContainsSubstring(
                 "shardgraph: distributed_sampler: 3 windows cannot give each of 4 data-parallel ranks one"));
  CHECK_THAT(error_of([] { (void)data::distributed_sampler(10, 0, 1, 1).epoch_indices(-1); }),
             ContainsSubstring("epoch -1 is negative"));
}

TEST_CASE("batch_loader's rows are windows with the next-token shift", "[data]") {
  const counting_tokens tokens{41};  // 10 windows of 4 + 1
  const std::int64_t seq = 4, batch = 2;
  data::batch_loader loader(
      tokens, data::distributed_sampler(data::window_count(tokens.size(), seq), 0, 1, 3), batch, seq);
  CHECK(loader.steps_per_epoch() == 5);
  auto b = loader.local_batch(0);
  REQUIRE(b.at("input_ids").shape() == std::vector<std::int64_t>{2, 4});
  REQUIRE(b.at("targets").shape() == std::vector<std::int64_t>{2, 4});
  CHECK(b.at("input_ids").type() == shardgraph::dtype::i64);
  const ids order = loader.sampler().epoch_order(0);
  for (std::int64_t row = 0; row < batch; ++row) {
    const std::int64_t start = order[static_cast<std::size_t>(row)] * seq;
    CHECK(row_block(b.at("input_ids"), row, row + 1) == ids{start, start + 1, start + 2, start + 3});
    CHECK(row_block(b.at("targets"), row, row + 1) == ids{start + 1, start + 2, start + 3, start + 4});
  }
}

TEST_CASE("batch_loader: rank r's local batch is rows [r*batch, (r+1)*batch) of the global batch", "[data]") {
  const counting_tokens tokens{10 * 8 * 3 + 5};  // 30 windows of 8 + 1 ...
  const std::int64_t seq = 8, batch = 2;
  const int dp = 3;
  const std::int64_t windows = data::window_count(tokens.size(), seq);
  std::vector<data::batch_loader<counting_tokens>> ranks;
  for (int r = 0; r < dp; ++r)
    ranks.emplace_back(tokens, data::distributed_sampler(windows, r, dp, 11), batch, seq);
  REQUIRE(ranks[0].steps_per_epoch() == 5);  // ... 10 per rank, 5 steps of 2
  REQUIRE(ranks[0].global_batch_size() == 6);

  for (std::int64_t step = 0; step < 12; ++step) {  // over two epochs and into a third
    const auto global = ranks[0].global_batch(step);
    REQUIRE(global.at("input_ids").shape() == std::vector<std::int64_t>{6, 8});
    for (int r = 0; r < dp; ++r) {
      for (const char* name : {"input_ids", "targets"})  // every rank computes the same global batch
        CHECK(values(ranks[static_cast<std::size_t>(r)].global_batch(step).at(name)) ==
              values(global.at(name)));
      const auto local = ranks[static_cast<std::size_t>(r)].local_batch(step);
      for (const char* name : {"input_ids", "targets"})
        CHECK(values(local.at(name)) == row_block(global.at(name), r * batch, (r + 1) * batch));
    }
  }
  // Over one epoch the global batches use each window once.
  std::set<std::int64_t> starts;
  for (std::int64_t step = 0; step < 5; ++step) {
    const ids inputs = values(ranks[0].global_batch(step).at("input_ids"));
    for (std::size_t row = 0; row < 6; ++row) CHECK(starts.insert(inputs[row * 8]).second);
  }
  CHECK(starts.size() == 30);
}

TEST_CASE("batch_loader's position advances through epochs and restores for resuming", "[data]") {
  const counting_tokens tokens{100};
  data::batch_loader loader(tokens, data::distributed_sampler(data::window_count(100, 9), 1, 2, 5), 2, 9);
  REQUIRE(loader.steps_per_epoch() == 2);  // 11 windows, 5 per rank, 2 steps of 2
  CHECK(loader.position() == data::data_position{0, 0});
  std::vector<ids> seen;
  for (int i = 0; i < 5; ++i) seen.push_back(values(loader.next_local_batch().at("input_ids")));
  CHECK(loader.position() == data::data_position{2, 1});
  CHECK(loader.position_of(5) == data::data_position{2, 1});
  for (std::int64_t step = 0; step < 5; ++step)
    CHECK(seen[static_cast<std::size_t>(step)] == values(loader.local_batch(step).at("input_ids")));

  const data::data_position saved = loader.position();
  const ids after = values(loader.next_global_batch().at("targets"));
  data::batch_loader resumed(tokens, data::distributed_sampler(data::window_count(100, 9), 1, 2, 5), 2, 9);
  resumed.restore(saved);
  CHECK(values(resumed.next_global_batch().at("targets")) == after);
  CHECK(resumed.position() == data::data_position{3, 0});

  CHECK_THAT(error_of([&] {
               resumed.restore({0, 2});
             }),
             ContainsSubstring("position (epoch 0, step 2) is outside the epochs of 2 steps"));
  CHECK_THAT(error_of([&] { resumed.restore({-1, 0}); }), ContainsSubstring("position (epoch -1"));
  CHECK_THAT(error_of([&] { (void)resumed.local_batch(-1); }), ContainsSubstring("step -1 is negative"));
}

TEST_CASE("batch_loader rejects a sampler larger than the data and batches larger than an epoch", "[data]") {
  const counting_tokens tokens{41};
  CHECK_THAT(
      error_of([&] { data::batch_loader loader(tokens, data::distributed_sampler(11, 0, 1, 0), 1, 4); }),
      ContainsSubstring(
          "the sampler covers 11 windows but 41 tokens hold only 10 windows of seq + 1 = 5 tokens"));
  CHECK_THAT(
      error_of([&] { data::batch_loader loader(tokens, data::distributed_sampler(10, 0, 2, 0), 6, 4); }),
      ContainsSubstring("each rank gets 5 windows per epoch, fewer than batch 6"));
  CHECK_THAT(
      error_of([&] { data::batch_loader loader(tokens, data::distributed_sampler(10, 0, 2, 0), 0, 4); }),
      ContainsSubstring("batch 0 and seq 4 must be positive"));
}

TEST_CASE("batch_loader reads a token_file", "[data]") {
  const std::string path = temp_path("stream.bin");
  ids stream(33);
  for (std::size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<std::int64_t>(i % 7);
  data::write_token_file(path, stream, 1);
  const data::token_file file(path, 7);
  data::batch_loader loader(
      file, data::distributed_sampler(data::window_count(file.size(), 8), 0, 1, 0, false), 2, 8);
  const auto b = loader.global_batch(1);  // windows 2 and 3: tokens [16, 25) and [24, 33)
  CHECK(values(b.at("input_ids")) == ids{2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3});
  CHECK(values(b.at("targets")) == ids{3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4});
}
