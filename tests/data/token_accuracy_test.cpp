#include "shardgraph/data/token_accuracy.hpp"

#include <cstdint>
#include <vector>

#include "catch.hpp"

namespace sg = shardgraph;
using ids = std::vector<std::int64_t>;

TEST_CASE("argmax_last_dim and accuracy score next-token predictions", "[data]") {
  // logits (2, 2, 3): argmax per position 2, 0 | 1, 0 (the first of equal values)
  const auto logits = sg::host_tensor::from<float>(
      {2, 2, 3}, std::vector<float>{0.1f, 0.2f, 0.9f, 5, -1, 2, 0, 3, 1, 4, 4, 4});
  const ids predicted = sg::data::argmax_last_dim(logits);
  CHECK(predicted == ids{2, 0, 1, 0});
  const ids targets{2, 1, 1, 0};
  const auto score = sg::data::accuracy(predicted, targets, std::vector<bool>{true, true, false, true});
  CHECK(score.correct == 2);
  CHECK(score.counted == 3);
  CHECK(score.value() == Approx(2.0 / 3.0));
  CHECK(sg::data::accuracy(predicted, targets, std::vector<bool>(4, false)).value() == 0.0);

  CHECK_THAT(
      sg::testing::error_of([&] { sg::data::accuracy(predicted, targets, std::vector<bool>(3, true)); }),
      sg::testing::ContainsSubstring("4 predictions, 4 targets and 3 mask entries differ in number"));
  CHECK_THAT(sg::testing::error_of([] {
               sg::data::argmax_last_dim(sg::host_tensor(sg::dtype::f64, {2, 0}));
             }),
             sg::testing::ContainsSubstring("last dimension of at least one class"));
}
