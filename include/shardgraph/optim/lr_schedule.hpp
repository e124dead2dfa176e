#pragma once
// Linear warmup then cosine decay, the GPT-2 schedule of llm.c and nanoGPT.
// Steps count from 1, as adamw_step's do; with W = warmup_steps and N = total_steps:
//   1 <= step <= W:  lr = max_lr * step / W                    (max_lr / W at step 1, max_lr at step W)
//   W <  step <= N:  lr = min_lr + (max_lr - min_lr) * (1 + cos(pi * (step - W) / (N - W))) / 2
//                                                              (min_lr exactly at step N)
//   N <  step:       lr = min_lr
// The warmup equals llm.c's max_lr * (s + 1) / W for its 0-based step s = step - 1. The decay
// reaches min_lr at the last step N, where llm.c's, counted from W rather than W + 1, stops one step
// short of it. Example, max_lr 1, min_lr 0.1, W 2, N 4: steps 1..5 give 0.5, 1, 0.55, 0.1, 0.1.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "shardgraph/core/error.hpp"

namespace shardgraph {

struct warmup_cosine {
  double max_lr = 0, min_lr = 0;
  std::int64_t warmup_steps = 0, total_steps = 0;

  // The learning rate of `step` (1-based). Throws shardgraph::error for a step below 1 or a schedule
  // that is not one: a negative or non-finite rate, min_lr above max_lr, negative step counts, or
  // warmup_steps above total_steps.
  double operator()(std::int64_t step) const {
    check();
    if (step < 1)
      fail("warmup_cosine", "step " + std::to_string(step) + " is not a step number (steps count from 1)",
           "pass 1 for the first update, as to adamw_step");
    if (step <= warmup_steps)  // the ratio first, so that step W gives max_lr exactly
      return max_lr * (static_cast<double>(step) / static_cast<double>(warmup_steps));
    if (step >= total_steps) return min_lr;
    const double progress =
        static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
    return min_lr + (max_lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
  }

  void check() const {
    constexpr auto where = "warmup_cosine";
    // Written as !(valid) so that NaN fails too.
    if (!(max_lr >= 0 && std::isfinite(max_lr)) || !(min_lr >= 0 && std::isfinite(min_lr)))
      fail(where,
           "max_lr " + std::to_string(max_lr) + " or min_lr " + std::to_string(min_lr) +
               " is negative or not finite",
           "give both learning rates finite values >= 0");
    if (min_lr > max_lr)
      fail(where, "min_lr " + std::to_string(min_lr) + " is above max_lr " + std::to_string(max_lr),
           "the schedule decays from max_lr to min_lr: give min_lr <= max_lr (often max_lr / 10)");
    if (warmup_steps < 0 || total_steps < 0)
      fail(where,
           "warmup_steps " + std::to_string(warmup_steps) + " or total_steps " + std::to_string(total_steps) +
               " is negative",
           "give step counts >= 0");
    if (warmup_steps > total_steps)
      fail(where,
           "warmup_steps " + std::to_string(warmup_steps) + " is above total_steps " +
               std::to_string(total_steps),
           "give warmup_steps <= total_steps (the warmup is part of the run)");
  }
};

}  // namespace shardgraph
