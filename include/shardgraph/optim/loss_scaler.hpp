#pragma once
// Dynamic loss scaling for f16 training, as torch.cuda.amp.GradScaler. Per step:
//   1. backward from loss * scale, so that small gradients do not underflow f16;
//   2. found_inf = !all_finite(...) over every gradient this rank holds, then max-reduced (logical or)
//      over ALL ranks: every rank must take the same decision, or their weights diverge;
//   3. unless found_inf: unscale the gradients (grad_clip.hpp's scale(grads, 1 / scale)), clip, step;
//   4. update(found_inf): true means apply the step, false means skip it (the scale was backed off).
// The scale halves on every overflow and doubles after growth_interval consecutive finite steps; a
// growth that would leave the range of float (where torch keeps the scale) is not taken.
//
// The whole state is the plain fields below, all of them saved and restored as they are (a copy, or
// torch's state_dict: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker).
#include <cmath>
#include <concepts>
#include <cstdint>
#include <span>
#include <string>

#include "shardgraph/core/error.hpp"

namespace shardgraph {

struct dynamic_loss_scaler {
  double scale = 65536, growth_factor = 2, backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  std::int64_t growth_tracker = 0;  // consecutive finite steps since the last growth or backoff

  // Records one step's outcome and returns whether to apply it (false: skip it, the scale is backed off).
  bool update(bool found_inf_or_nan) {
    check();
    if (found_inf_or_nan) {
      scale *= backoff_factor;
      growth_tracker = 0;
      return false;
    }
    if (++growth_tracker == growth_interval) {
      const double grown = scale * growth_factor;
      if (std::isfinite(static_cast<float>(grown))) scale = grown;
      growth_tracker = 0;
    }
    return true;
  }

  // Throws shardgraph::error for settings or a restored state that torch would refuse or never reach.
  void check() const {
    constexpr auto where = "dynamic_loss_scaler";
    if (!(scale > 0 && std::isfinite(scale)))
      fail(where, "scale " + std::to_string(scale) + " is not a positive finite number",
           "start from a power of two such as 65536");
    if (!(growth_factor > 1 && std::isfinite(growth_factor)))
      fail(where, "growth_factor " + std::to_string(growth_factor) + " is not above 1",
           "give a growth_factor > 1 (torch: 2)");
    if (!(backoff_factor > 0 && backoff_factor < 1))
      fail(where, "backoff_factor " + std::to_string(backoff_factor) + " is not in (0, 1)",
           "give a backoff_factor in (0, 1) (torch: 0.5)");
    if (growth_interval < 1)
      fail(where, "growth_interval " + std::to_string(growth_interval) + " is below 1",
           "give a growth_interval >= 1 (torch: 2000)");
    if (growth_tracker < 0 || growth_tracker >= growth_interval)
      fail(where,
           "growth_tracker " + std::to_string(growth_tracker) +
               " is outside [0, growth_interval = " + std::to_string(growth_interval) + ")",
           "restore growth_tracker from the same saved state as growth_interval");
  }

  bool operator==(const dynamic_loss_scaler&) const = default;
};

// Whether every value is finite (no infinity, no NaN).
template <std::floating_point T>
bool all_finite(std::span<const T> values) {
  for (const T x : values)
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace shardgraph
