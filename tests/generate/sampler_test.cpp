#include "shardgraph/generate/sampler.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "catch.hpp"

namespace generate = shardgraph::generate;
using generate::token_id;
using shardgraph::testing::ContainsSubstring;
using shardgraph::testing::error_of;

namespace {

constexpr double dropped = -std::numeric_limits<double>::infinity();

token_id sample(const std::vector<double>& logits, const generate::sampling_params& p,
                const std::vector<token_id>& history = {}, std::int64_t n = 0) {
  return generate::sample_next_token(std::span<const double>(logits), p, history, n);
}

std::vector<double> log_of(const std::vector<double>& probabilities) {
  std::vector<double> logits;
  for (const double p : probabilities) logits.push_back(std::log(p));
  return logits;
}

}  // namespace

TEST_CASE("greedy is the argmax, the lowest id on a tie", "[generate]") {
  CHECK(sample({1, 3, 2, 3}, {}) == 1);
  CHECK(sample({-5, -1, -2}, {}) == 1);
  const std::vector<float> f32{0.5f, 0.25f, 2.0f};
  CHECK(generate::sample_next_token(std::span<const float>(f32), {}, {}, 0) == 2);
}

TEST_CASE("the repetition penalty divides positive logits and multiplies negative ones, once per id",
          "[generate]") {
  std::vector<double> logits{2, -2, 1.5, 0.5};
  const std::vector<token_id> history{0, 1, 1};
  generate::apply_repetition_penalty(logits, history, 2);
  CHECK(logits == std::vector<double>{1, -4, 1.5, 0.5});
  // Greedy sees the penalized logits: token 0 loses to token 2.
  CHECK(sample({2, -2, 1.5, 0.5}, {}, history) == 0);
  CHECK(sample({2, -2, 1.5, 0.5}, {.repetition_penalty = 2}, history) == 2);
}

TEST_CASE("top-k keeps the k largest logits and the ties of the k-th", "[generate]") {
  std::vector<double> logits{1, 4, 3, 4, 2};
  generate::apply_top_k(logits, 2);
  CHECK(logits == std::vector<double>{dropped, 4, dropped, 4, dropped});
  logits = {1, 4, 3, 4, 2};
  generate::apply_top_k(logits, 3);
  CHECK(logits == std::vector<double>{dropped, 4, 3, 4, dropped});
  logits = {1, 4, 3};
  generate::apply_top_k(logits, 0);
  CHECK(logits == std::vector<double>{1, 4, 3});
}

TEST_CASE("top-p drops the least likely tokens whose probabilities sum to at most 1 - top_p", "[generate]") {
  // Probabilities 0.5, 0.3, 0.15, 0.05. From the least likely: 0.05, 0.20, 0.50, 1.00.
  std::vector<double> logits = log_of({0.5, 0.3, 0.15, 0.05});
  generate::apply_top_p(logits, 0.75);  // drops while the sum is <= 0.25: tokens 3 and 2
  CHECK(logits[0] == Approx(std::log(0.5)));
  CHECK(logits[1] == Approx(std::log(0.3)));
  CHECK(logits[2] == dropped);
  CHECK(logits[3] == dropped);
  logits = log_of({0.5, 0.3, 0.15, 0.05});
  generate::apply_top_p(logits, 0.9);  // <= 0.1: token 3 only
  CHECK(logits[2] == Approx(std::log(0.15)));
  CHECK(logits[3] == dropped);
  logits = log_of({0.5, 0.3, 0.15, 0.05});
  generate::apply_top_p(logits, 0.01);  // the most likely always stays
  CHECK(logits[0] == Approx(std::log(0.5)));
  CHECK(logits[1] == dropped);
}

TEST_CASE("a draw walks the cumulative probabilities in id order", "[generate]") {
  const std::vector<double> logits = log_of({0.5, 0.3, 0.2});
  CHECK(generate::draw_from(logits, 0.0) == 0);
  CHECK(generate::draw_from(logits, 0.49) == 0);
  CHECK(generate::draw_from(logits, 0.51) == 1);
  CHECK(generate::draw_from(logits, 0.79) == 1);
  CHECK(generate::draw_from(logits, 0.81) == 2);
  CHECK(generate::draw_from(std::vector<double>{dropped, 1.0, dropped}, 0.99) == 1);
}

TEST_CASE("sampling applies temperature, then top-k, then top-p, then draws at (seed, n)", "[generate]") {
  const std::vector<double> logits{1.0, 2.0, 0.5, 1.5};
  const generate::sampling_params p{.temperature = 0.5, .top_k = 3, .top_p = 0.9, .seed = 11};
  for (std::int64_t n = 0; n < 50; ++n) {
    // By hand: logits / 0.5 = {2, 4, 1, 3}; top-3 drops id 2; softmax of {2, 4, 3} (ids 0, 1, 3) is
    // {0.090, 0.665, 0.245}; top-p 0.9 drops id 0 (0.090 <= 0.1); renormalized {0.731, 0.269} over
    // ids 1 and 3.
    const double u = generate::uniform_draw(11, n);
    const double p1 = std::exp(4.0) / (std::exp(4.0) + std::exp(3.0));
    CHECK(sample(logits, p, {}, n) == (u < p1 ? 1 : 3));
  }
}

TEST_CASE("draws depend only on (seed, n) and follow the probabilities", "[generate]") {
  CHECK(generate::uniform_draw(1, 0) == generate::uniform_draw(1, 0));
  CHECK(generate::uniform_draw(1, 0) != generate::uniform_draw(1, 1));
  CHECK(generate::uniform_draw(1, 0) != generate::uniform_draw(2, 0));
  const std::vector<double> logits = log_of({0.5, 0.3, 0.2});
  std::vector<int> counts(3, 0);
  const int draws = 20000;
  for (int n = 0; n < draws; ++n)
    ++counts[static_cast<std::size_t>(sample(logits, {.temperature = 1, .seed = 5}, {}, n))];
  CHECK(counts[0] / double(draws) == Approx(0.5).margin(0.015));
  CHECK(counts[1] / double(draws) == Approx(0.3).margin(0.015));
  CHECK(counts[2] / double(draws) == Approx(0.2).margin(0.015));
}

TEST_CASE("bad sampling parameters are errors naming the field", "[generate]") {
  const std::vector<double> logits{1, 2};
  CHECK(error_of([&] { sample(logits, {.temperature = -1}); }) ==
        "shardgraph: sampler: temperature is -1.000000, not a finite number >= 0. give 0 for greedy or a "
        "positive "
        "temperature");
  CHECK_THAT(error_of([&] { sample(logits, {.top_p = 0}); }),
             ContainsSubstring("top_p is 0.000000, outside (0, 1]"));
  CHECK_THAT(error_of([&] { sample(logits, {.top_p = 1.5}); }),
             ContainsSubstring("top_p is 1.500000, outside (0, 1]"));
  CHECK_THAT(error_of([&] { sample(logits, {.top_k = -1}); }), ContainsSubstring("top_k is -1, negative"));
  CHECK_THAT(error_of([&] { sample(logits, {.repetition_penalty = 0}); }),
             ContainsSubstring("repetition_penalty is 0.000000, not a finite number > 0"));
  CHECK_THAT(error_of([&] {
               sample(logits, {}, {0, 2});
             }),
             ContainsSubstring("sampler: history token 1 is 2, outside the vocabulary [0, 2)"));
  CHECK_THAT(error_of([&] { sample({}, {}); }), ContainsSubstring("sampler: the logits are empty"));
  CHECK_THAT(error_of([&] { sample({0, std::nan("")}, {}); }), ContainsSubstring("sampler: logit 1 is NaN"));
}
