// warmup_cosine at its boundaries: step 1, the end of warmup, the middle and end of the decay, after it.
#include "shardgraph/optim/lr_schedule.hpp"

#include <cmath>
#include <cstdint>
#include <numbers>

#include "catch.hpp"

namespace sg = shardgraph;
using sg::testing::contains;
using sg::testing::error_of;

TEST_CASE("warmup_cosine: linear warmup from max_lr / warmup at step 1 to max_lr at step warmup", "[optim]") {
  const sg::warmup_cosine schedule{.max_lr = 6e-4, .min_lr = 6e-5, .warmup_steps = 700, .total_steps = 19073};
  CHECK(schedule(1) == Approx(6e-4 / 700).epsilon(1e-15));
  CHECK(schedule(2) == Approx(2 * 6e-4 / 700).epsilon(1e-15));
  CHECK(schedule(350) == Approx(3e-4).epsilon(1e-15));
  CHECK(schedule(700) == 6e-4);
  // llm.c's warmup, max_lr * (s + 1) / warmup for its 0-based step s, is the same sequence.
  for (std::int64_t s = 0; s < 700; ++s)
    CHECK(schedule(s + 1) == Approx(6e-4 * double(s + 1) / 700).epsilon(1e-15));
}

TEST_CASE("warmup_cosine: cosine decay to min_lr at total_steps, min_lr after", "[optim]") {
  // The header's example: max 1, min 0.1, warmup 2, total 4: 0.5, 1, 0.55, 0.1, 0.1.
  const sg::warmup_cosine small{.max_lr = 1, .min_lr = 0.1, .warmup_steps = 2, .total_steps = 4};
  CHECK(small(1) == 0.5);
  CHECK(small(2) == 1.0);
  CHECK(small(3) == Approx(0.55).epsilon(1e-15));
  CHECK(small(4) == 0.1);
  CHECK(small(5) == 0.1);
  CHECK(small(1'000'000'000'000) == 0.1);

  const sg::warmup_cosine schedule{.max_lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 10, .total_steps = 110};
  CHECK(schedule(10) == 1e-3);
  // One step into the decay: progress 1/100.
  CHECK(schedule(11) == Approx(1e-4 + 9e-4 * 0.5 * (1 + std::cos(std::numbers::pi / 100))).epsilon(1e-14));
  CHECK(schedule(11) < 1e-3);
  CHECK(schedule(60) == Approx(5.5e-4).epsilon(1e-14));  // halfway: the mean of max and min
  CHECK(schedule(109) ==
        Approx(1e-4 + 9e-4 * 0.5 * (1 + std::cos(std::numbers::pi * 99 / 100))).epsilon(1e-14));
  CHECK(schedule(110) == 1e-4);
  CHECK(schedule(111) == 1e-4);
  for (std::int64_t s = 11; s <= 110; ++s) CHECK(schedule(s) < schedule(s - 1));
}

TEST_CASE("warmup_cosine: no warmup, no decay, constant rate", "[optim]") {
  const sg::warmup_cosine no_warmup{.max_lr = 1, .min_lr = 0, .warmup_steps = 0, .total_steps = 2};
  CHECK(no_warmup(1) == Approx(0.5).epsilon(1e-15));  // cos(pi / 2): already decaying at step 1
  CHECK(no_warmup(2) == 0.0);
  const sg::warmup_cosine warmup_only{.max_lr = 1, .min_lr = 0.25, .warmup_steps = 4, .total_steps = 4};
  CHECK(warmup_only(4) == 1.0);
  CHECK(warmup_only(5) == 0.25);
  const sg::warmup_cosine constant{.max_lr = 0.5, .min_lr = 0.5, .warmup_steps = 0, .total_steps = 10};
  for (std::int64_t s = 1; s <= 12; ++s) CHECK(constant(s) == 0.5);
}

TEST_CASE("warmup_cosine rejects steps below 1 and schedules that are not one", "[optim]") {
  const sg::warmup_cosine good{.max_lr = 1, .min_lr = 0.1, .warmup_steps = 2, .total_steps = 4};
  CHECK(contains(error_of([&] { (void)good(0); }),
                 "shardgraph: warmup_cosine: step 0 is not a step number (steps count from 1). pass 1"));
  CHECK(contains(error_of([&] { (void)good(-5); }), "step -5"));

  auto bad = good;
  bad.warmup_steps = 5;
  CHECK(contains(error_of([&] { (void)bad(1); }),
                 "warmup_cosine: warmup_steps 5 is above total_steps 4. give warmup_steps <= total_steps"));
  bad = good;
  bad.warmup_steps = -1;
  CHECK(contains(error_of([&] { (void)bad(1); }), "warmup_steps -1 or total_steps 4 is negative"));
  bad = good;
  bad.total_steps = -4;
  CHECK(contains(error_of([&] { bad.check(); }), "is negative. give step counts >= 0"));
  bad = good;
  bad.max_lr = -1;
  CHECK(contains(error_of([&] { (void)bad(3); }),
                 "max_lr -1.000000 or min_lr 0.100000 is negative or not finite"));
  bad = good;
  bad.min_lr = std::nan("");
  CHECK(contains(error_of([&] { (void)bad(3); }), "is negative or not finite"));
  bad = good;
  bad.min_lr = 2;
  CHECK(contains(error_of([&] { (void)bad(3); }), "min_lr 2.000000 is above max_lr 1.000000"));
  CHECK(error_of([&] { good.check(); }) == "(no error)");
}
