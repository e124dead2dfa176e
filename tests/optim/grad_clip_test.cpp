// Global-norm clipping: torch's coefficient, and the ownership rule that makes the norm of a sharded
// model equal the norm of the unsharded one (2 tp ranks simulated, a sharded and a replicated tensor).
#include "shardgraph/optim/grad_clip.hpp"

#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "catch.hpp"

namespace sg = shardgraph;
using sg::testing::contains;
using sg::testing::error_of;

TEST_CASE("sum_of_squares accumulates in double; scale multiplies in place", "[optim]") {
  const std::vector<float> g = {3.0f, -4.0f};
  CHECK(sg::sum_of_squares<float>(g) == 25.0);
  CHECK(sg::sum_of_squares<double>(std::vector<double>{}) == 0.0);
  // 2^24 + 1 ones: a float accumulator stops at 2^24, a double one does not.
  const std::vector<float> ones((1u << 24) + 1u, 1.0f);
  CHECK(sg::sum_of_squares<float>(ones) == 16777217.0);
  CHECK(std::isinf(
      sg::sum_of_squares<float>(std::vector<float>{1.0f, std::numeric_limits<float>::infinity()})));

  std::vector<float> x = {1.0f, -2.0f, 0.5f};
  sg::scale<float>(x, 0.5);
  CHECK(x == std::vector<float>{0.5f, -1.0f, 0.25f});
  std::vector<double> y = {3.0};
  sg::scale<double>(y, 1.0 / 3.0);
  CHECK(y[0] == Approx(1.0).epsilon(1e-15));
}

TEST_CASE("clip_coefficient is min(1, max_norm / (norm + 1e-6)) as torch's clip_grad_norm_", "[optim]") {
  CHECK(sg::clip_coefficient(25.0, 1.0) == Approx(1.0 / (5.0 + 1e-6)).epsilon(1e-15));  // norm 5: scale down
  CHECK(sg::clip_coefficient(0.25, 1.0) == 1.0);                                        // norm 0.5: untouched
  CHECK(sg::clip_coefficient(1.0, 1.0) == Approx(1.0 / 1.000001).epsilon(1e-15));       // just above: clipped
  CHECK(sg::clip_coefficient(0.0, 1.0) == 1.0);
  CHECK(sg::clip_coefficient(25.0, 0.0) == 0.0);
  CHECK(sg::clip_coefficient(1e30, std::numeric_limits<double>::infinity()) == 1.0);
  CHECK(sg::clip_coefficient(std::numeric_limits<double>::infinity(), 1.0) == 0.0);
  CHECK(std::isnan(sg::clip_coefficient(std::nan(""), 1.0)));
  CHECK(sg::global_norm(25.0) == 5.0);

  // After scaling, the norm is max_norm (up to the 1e-6).
  std::vector<double> g = {3.0, 4.0};
  sg::scale<double>(g, sg::clip_coefficient(sg::sum_of_squares<double>(g), 1.0));
  CHECK(std::sqrt(sg::sum_of_squares<double>(g)) == Approx(1.0).epsilon(1e-6));

  CHECK(
      contains(error_of([] { (void)sg::clip_coefficient(1.0, -1.0); }),
               "shardgraph: clip_coefficient: max_norm -1.000000 is negative or NaN. give a max_norm >= 0"));
  CHECK(contains(error_of([] { (void)sg::clip_coefficient(1.0, std::nan("")); }), "is negative or NaN"));
  CHECK(contains(error_of([] { (void)sg::clip_coefficient(-1.0, 1.0); }),
                 "shardgraph: global_norm: the sum of squares -1.000000 is negative"));
}

TEST_CASE(
    "the global norm under tp = 2 equals the unsharded norm: sharded counted once, replicated on rank 0",
    "[optim]") {
  // Full gradients: W (4, 2), column-parallel (Shard<1> on tp); b (3,), replicated on tp.
  const std::vector<double> w = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8};  // row-major (4, 2)
  const std::vector<double> b = {1.5, -2.5, 0.25};
  const double unsharded = sg::sum_of_squares<double>(w) + sg::sum_of_squares<double>(b);

  constexpr int tp = 2;
  std::vector<double> per_rank(tp);
  std::vector<double> per_rank_buggy(tp);
  for (int rank = 0; rank < tp; ++rank) {
    std::vector<double> w_slice;  // column `rank` of W: (4, 1)
    for (std::size_t row = 0; row < 4; ++row) w_slice.push_back(w[row * 2 + static_cast<std::size_t>(rank)]);
    const std::vector<double> b_copy = b;  // every tp rank holds all of b
    per_rank[static_cast<std::size_t>(rank)] =
        sg::sum_of_squares<double>(w_slice) + (rank == 0 ? sg::sum_of_squares<double>(b_copy) : 0.0);
    per_rank_buggy[static_cast<std::size_t>(rank)] =
        sg::sum_of_squares<double>(w_slice) + sg::sum_of_squares<double>(b_copy);
  }
  const double reduced = per_rank[0] + per_rank[1];  // the all-reduce over tp
  CHECK(reduced == Approx(unsharded).epsilon(1e-15));
  CHECK(sg::global_norm(reduced) == Approx(std::sqrt(unsharded)).epsilon(1e-15));
  CHECK(sg::clip_coefficient(reduced, 1.0) == Approx(sg::clip_coefficient(unsharded, 1.0)).epsilon(1e-15));
  // Counting the replicated bias on both ranks counts it twice.
  const double buggy = per_rank_buggy[0] + per_rank_buggy[1];
  CHECK(buggy == Approx(unsharded + sg::sum_of_squares<double>(b)).epsilon(1e-15));
  CHECK(sg::clip_coefficient(buggy, 1.0) < sg::clip_coefficient(unsharded, 1.0));

  // The header's worked example: W = [[1, 2], [3, 4]], b = [1, 2]: 15 + 20 = 35, the bug gives 40.
  const std::vector<double> rank0_w = {1, 3}, rank1_w = {2, 4}, bias = {1, 2};
  CHECK(sg::sum_of_squares<double>(rank0_w) + sg::sum_of_squares<double>(bias) == 15.0);
  CHECK(sg::sum_of_squares<double>(rank1_w) == 20.0);
  CHECK(sg::sum_of_squares<double>(rank1_w) + sg::sum_of_squares<double>(bias) == 25.0);
}
