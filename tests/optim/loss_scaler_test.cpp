// Dynamic loss scaling as torch's GradScaler: growth after growth_interval finite steps, backoff and skip
// on overflow, saved and restored state, and the finiteness check.
#include "shardgraph/optim/loss_scaler.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "catch.hpp"

namespace sg = shardgraph;
using sg::testing::contains;
using sg::testing::error_of;

TEST_CASE("dynamic_loss_scaler has torch's defaults", "[optim]") {
  const sg::dynamic_loss_scaler s;
  CHECK(s.scale == 65536.0);
  CHECK(s.growth_factor == 2.0);
  CHECK(s.backoff_factor == 0.5);
  CHECK(s.growth_interval == 2000);
  CHECK(s.growth_tracker == 0);
}

TEST_CASE("dynamic_loss_scaler grows after growth_interval consecutive finite steps", "[optim]") {
  sg::dynamic_loss_scaler s{.scale = 1024, .growth_interval = 3};
  CHECK(s.update(false));
  CHECK(s.update(false));
  CHECK(s.scale == 1024);
  CHECK(s.growth_tracker == 2);
  CHECK(s.update(false));  // the third: grow, restart the count
  CHECK(s.scale == 2048);
  CHECK(s.growth_tracker == 0);
  for (int i = 0; i < 3; ++i) CHECK(s.update(false));
  CHECK(s.scale == 4096);
}

TEST_CASE("dynamic_loss_scaler backs off and skips on overflow, and restarts the growth count", "[optim]") {
  sg::dynamic_loss_scaler s{.scale = 1024, .growth_interval = 3};
  // finite, finite, inf (skip), finite, finite, finite (grow), inf, inf (skip twice)
  const bool found_inf[] = {false, false, true, false, false, false, true, true};
  const bool expected_apply[] = {true, true, false, true, true, true, false, false};
  const double expected_scale[] = {1024, 1024, 512, 512, 512, 1024, 512, 256};
  const std::int64_t expected_tracker[] = {1, 2, 0, 1, 2, 0, 0, 0};
  for (int i = 0; i < 8; ++i) {
    CAPTURE(i);
    CHECK(s.update(found_inf[i]) == expected_apply[i]);
    CHECK(s.scale == expected_scale[i]);
    CHECK(s.growth_tracker == expected_tracker[i]);
  }
}

TEST_CASE("dynamic_loss_scaler does not grow past the range of float, as torch keeps the scale in f32",
          "[optim]") {
  sg::dynamic_loss_scaler s{.scale = 0x1p127, .growth_interval = 1};
  CHECK(s.update(false));
  CHECK(s.scale == 0x1p127);  // 2^128 is not a float
  CHECK(s.growth_tracker == 0);
  s.scale = 0x1p126;
  CHECK(s.update(false));
  CHECK(s.scale == 0x1p127);
}

TEST_CASE("dynamic_loss_scaler state saves and restores as a plain copy", "[optim]") {
  sg::dynamic_loss_scaler running{.scale = 256, .growth_interval = 4};
  for (bool inf : {false, true, false, false}) running.update(inf);
  const sg::dynamic_loss_scaler saved = running;  // e.g. written to a checkpoint
  sg::dynamic_loss_scaler restored;
  restored = saved;
  for (bool inf : {false, false, true, false}) CHECK(running.update(inf) == restored.update(inf));
  CHECK(running == restored);
  CHECK(restored.scale == 128.0);
  CHECK(restored.growth_tracker == 1);
}

TEST_CASE("dynamic_loss_scaler rejects settings and states torch would not accept", "[optim]") {
  auto error_after = [](sg::dynamic_loss_scaler s) { return error_of([&] { s.update(false); }); };
  CHECK(contains(
      error_after({.scale = 0}),
      "shardgraph: dynamic_loss_scaler: scale 0.000000 is not a positive finite number. start from"));
  CHECK(
      contains(error_after({.scale = std::numeric_limits<double>::infinity()}), "is not a positive finite"));
  CHECK(contains(error_after({.growth_factor = 1}), "growth_factor 1.000000 is not above 1"));
  CHECK(contains(error_after({.backoff_factor = 1}), "backoff_factor 1.000000 is not in (0, 1)"));
  CHECK(contains(error_after({.backoff_factor = 0}), "backoff_factor 0.000000 is not in (0, 1)"));
  CHECK(contains(error_after({.growth_interval = 0}), "growth_interval 0 is below 1"));
  CHECK(contains(error_after({.growth_interval = 10, .growth_tracker = 10}),
                 "growth_tracker 10 is outside [0, growth_interval = 10). restore growth_tracker"));
  CHECK(contains(error_after({.growth_tracker = -1}), "growth_tracker -1 is outside"));
  sg::dynamic_loss_scaler s{.scale = -1};
  CHECK(contains(error_of([&] { s.update(true); }), "scale -1.000000"));
  CHECK(s.scale == -1);  // untouched by the failed update
}

TEST_CASE("all_finite finds infinities and NaN", "[optim]") {
  CHECK(sg::all_finite<float>(std::vector<float>{0.0f, -1.0f, std::numeric_limits<float>::max()}));
  CHECK(sg::all_finite<double>(std::vector<double>{}));
  CHECK_FALSE(sg::all_finite<float>(std::vector<float>{1.0f, std::numeric_limits<float>::infinity()}));
  CHECK_FALSE(sg::all_finite<float>(std::vector<float>{-std::numeric_limits<float>::infinity()}));
  CHECK_FALSE(sg::all_finite<double>(std::vector<double>{std::nan(""), 1.0}));
  // 65504 * 2 overflows f16, not f32: the check is of the values as held.
  CHECK(sg::all_finite<float>(std::vector<float>{131008.0f}));
}
