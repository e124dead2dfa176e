// The vocabulary-parallel cross-entropy's kernels (cpu/vocab_parallel_loss.hpp) against the whole
// vocabulary's (cpu/cross_entropy.hpp): logits of 12 columns, 10 of them classes, split over 3
// ranks of 4 columns (the last holds 2 classes and the 2 padding columns), the all-reduces between
// the calls done by hand. Loss and gradient agree to rounding in double.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/cpu/backward.hpp"
#include "shardgraph/cpu/kernels.hpp"

namespace {

namespace cpu = shardgraph::cpu;
using std::int64_t;

constexpr int64_t rows = 5, vocab = 12, classes = 10, ranks = 3, columns = vocab / ranks;

// Columns [r * columns, (r + 1) * columns) of every row.
std::vector<double> slice_of(const std::vector<double>& logits, int64_t r) {
  std::vector<double> s;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < columns; ++j) s.push_back(logits[static_cast<std::size_t>(i * vocab + r * columns + j)]);
  return s;
}

cpu::vocab_slice slice(int64_t r) {
  return {.rows = rows, .columns = columns, .classes = classes, .offset = r * columns, .ignore_index = -100,
          .ranks = ranks};
}

// Each row's log-sum-exp over the classes, from the three ranks' slices: statistics, all-reduce,
// sums, all-reduce, log-sum-exp. `stats` receives the reduced statistics.
std::vector<double> reduced_lse(const std::vector<double>& logits, const std::vector<int64_t>& targets,
                                std::vector<double>& stats) {
  stats.assign(rows * 2, 0.0);
  std::vector<double> sums(rows, 0.0), part(rows * 2), part_sums(rows);
  for (int64_t r = 0; r < ranks; ++r) {
    cpu::vocab_statistics(slice_of(logits, r).data(), targets.data(), part.data(), slice(r));
    for (std::size_t k = 0; k < stats.size(); ++k) stats[k] += part[k];
  }
  for (int64_t r = 0; r < ranks; ++r) {
    cpu::vocab_exp_sum(slice_of(logits, r).data(), stats.data(), part_sums.data(), slice(r));
    for (std::size_t k = 0; k < sums.size(); ++k) sums[k] += part_sums[k];
  }
  std::vector<double> lse(rows);
  cpu::vocab_log_sum_exp(stats.data(), sums.data(), lse.data(), rows);
  return lse;
}

std::vector<double> random_logits(double spread, unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> value(-spread, spread);
  std::vector<double> logits(rows * vocab);
  for (double& x : logits) x = value(random);
  return logits;
}

}  // namespace

TEST_CASE("vocabulary-parallel cross-entropy equals the whole vocabulary's, loss and gradient", "[cpu]") {
  const std::vector<int64_t> targets{3, -100, 9, 0, 6};  // targets in each rank's slice, one ignored
  for (double spread : {1.0, 40.0, 400.0}) {  // 400: far beyond exp's range without the shifts
    const std::vector<double> logits = random_logits(spread, 7);
    std::vector<double> stats;
    const std::vector<double> lse = reduced_lse(logits, targets, stats);
    const double whole = cpu::cross_entropy_sum(logits.data(), targets.data(), rows, vocab, nullptr,
                                                {.classes = classes, .ignore_index = -100});
    const double split = cpu::vocab_cross_entropy_sum(targets.data(), lse.data(), stats.data(), rows, -100);
    CHECK(std::abs(split - whole) <= 1e-12 * std::abs(whole));

    std::vector<double> expected(rows * vocab), gradient(rows * columns);
    cpu::cross_entropy_backward(logits.data(), targets.data(), expected.data(), rows, vocab, 0.25,
                                {.classes = classes, .ignore_index = -100});
    for (int64_t r = 0; r < ranks; ++r) {
      cpu::vocab_cross_entropy_backward(slice_of(logits, r).data(), targets.data(), lse.data(), gradient.data(),
                                        slice(r), 0.25);
      const std::vector<double> want = slice_of(expected, r);
      for (std::size_t k = 0; k < want.size(); ++k) CHECK(std::abs(gradient[k] - want[k]) <= 1e-12);
    }
  }
}

TEST_CASE("vocabulary-parallel statistics: the target's logit on its rank, padding left out", "[cpu]") {
  const std::vector<int64_t> targets{4, 9, -100, 0, 7};
  const std::vector<double> logits = random_logits(3.0, 11);
  std::vector<double> stats(rows * 2);
  cpu::vocab_statistics(slice_of(logits, 1).data(), targets.data(), stats.data(), slice(1));  // columns 4..7
  CHECK(stats[0] == logits[0 * vocab + 4]);
  CHECK(stats[2] == 0.0);  // target 9 lies on rank 2
  CHECK(stats[4] == 0.0);  // ignored
  CHECK(stats[8] == logits[4 * vocab + 7]);
  cpu::vocab_statistics(slice_of(logits, 2).data(), targets.data(), stats.data(), slice(2));  // 8, 9 and padding
  const double lse_8_9 = std::log(std::exp(logits[8]) + std::exp(logits[9]));
  CHECK(std::abs(stats[1] - lse_8_9 / ranks) <= 1e-15);
  CHECK(slice(2).class_columns() == 2);
  CHECK(cpu::vocab_slice{.rows = 1, .columns = 4, .classes = 6, .offset = 8}.class_columns() == 0);
}

TEST_CASE("an overflowed vocabulary-parallel log-sum-exp is an error, not an infinite loss", "[cpu]") {
  const std::vector<int64_t> targets{1, 2};
  const std::vector<float> lse{1.0f, std::numeric_limits<float>::infinity()}, stats{0.5f, 0.f, 0.5f, 0.f};
  try {
    cpu::vocab_cross_entropy_sum(targets.data(), lse.data(), stats.data(), 2, -100);
    FAIL("no error");
  } catch (const shardgraph::error& e) {
    CHECK(std::string(e.what()).find("row 1's log-sum-exp over the vocabulary-sharded logits overflowed") !=
          std::string::npos);
  }
}
