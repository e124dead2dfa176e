// split_micro_batches: consecutive rows per part, every tensor cut alike; a count that does not
// divide the rows is refused with the fix.
#include <shardgraph/data/micro_batches.hpp>

#include <cstdint>
#include <vector>

#include "catch.hpp"

namespace sg = shardgraph;

TEST_CASE("split_micro_batches cuts every tensor into consecutive rows", "[data]") {
  std::vector<std::int64_t> ids(6 * 2), targets(6 * 2);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>(i);
    targets[i] = 100 + static_cast<std::int64_t>(i);
  }
  std::map<std::string, sg::host_tensor> batch;
  batch.emplace("input_ids", sg::host_tensor::from<std::int64_t>({6, 2}, ids));
  batch.emplace("targets", sg::host_tensor::from<std::int64_t>({6, 2}, targets));
  const auto parts = sg::data::split_micro_batches(batch, 3);
  REQUIRE(parts.size() == 3);
  for (std::size_t k = 0; k < 3; ++k) {
    CHECK(parts[k].at("input_ids").shape() == std::vector<std::int64_t>{2, 2});
    const auto got = parts[k].at("input_ids").values<std::int64_t>();
    const auto got_targets = parts[k].at("targets").values<std::int64_t>();
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(got[i] == static_cast<std::int64_t>(4 * k + i));
      CHECK(got_targets[i] == static_cast<std::int64_t>(100 + 4 * k + i));
    }
  }
  CHECK(sg::testing::contains(sg::testing::error_of([&] { sg::data::split_micro_batches(batch, 4); }),
                              "'input_ids' has 6 rows, which do not split into 4 micro-batches. choose a "
                              "micro-batch count that divides the batch"));
  CHECK(sg::testing::contains(sg::testing::error_of([&] { sg::data::split_micro_batches(batch, 0); }),
                              "give at least one micro-batch"));
}
