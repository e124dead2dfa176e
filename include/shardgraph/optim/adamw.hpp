#pragma once
// AdamW as torch.optim.AdamW (amsgrad=False, maximize=False): the reference every backend's fused
// optimizer must match. For step t (1-based), learning rate lr, weight decay wd, per element:
//   param *= 1 - lr * wd                          (decoupled decay, before the Adam update; if decay)
//   m = beta1 * m + (1 - beta1) * grad
//   v = beta2 * v + (1 - beta2) * grad^2
//   param -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// which is torch's m_hat / (sqrt(v_hat) + eps) with eps added after the square root.
// Each element is computed in double from its stored values and stored back as T.
//
// Which parameters decay is the caller's choice, through `decay`. nanoGPT's convention, which the
// models here follow: every parameter with 2 or more dimensions decays (the weights of linears and
// the embeddings), every parameter with fewer does not (biases, layer/RMS norm gains).
//
// Sharding: the update is elementwise, so each rank calls it on the slice of param, grad, m and v
// that it owns (ZeRO: its shard on dp); the four spans must cover the same elements.
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/half.hpp"

namespace shardgraph {

// torch.optim.AdamW's arguments, with the GPT-2/nanoGPT training defaults (beta2 0.95, wd 0.1).
// `lr` is the peak rate that schedules start from; adamw_step takes the current rate explicitly.
struct adamw_config {
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

namespace detail {

// The per-step scalars of the update, after checking the hyperparameters as torch does.
struct adamw_coefficients {
  double beta1, beta2, eps;
  double decay_factor;           // 1 - lr * wd, or 1 without decay
  double step_size;              // lr / (1 - beta1^t)
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

inline adamw_coefficients adamw_coefficients_for(std::string_view where, const adamw_config& config,
                                                 std::int64_t step, double lr, bool decay) {
  const auto check = [where](bool ok, std::string_view name, double value, std::string_view range) {
    if (!ok)
      fail(where, std::string(name) + " is " + std::to_string(value) + ", outside " + std::string(range),
           "give " + std::string(name) + " a value in " + std::string(range));
  };
  // Written as !(in range) too, so that NaN fails every check.
  check(lr >= 0 && std::isfinite(lr), "lr", lr, "[0, inf)");
  check(config.beta1 >= 0 && config.beta1 < 1, "beta1", config.beta1, "[0, 1)");
  check(config.beta2 >= 0 && config.beta2 < 1, "beta2", config.beta2, "[0, 1)");
  check(config.eps >= 0 && std::isfinite(config.eps), "eps", config.eps, "[0, inf)");
  check(config.weight_decay >= 0 && std::isfinite(config.weight_decay), "weight_decay", config.weight_decay,
        "[0, inf)");
  if (step < 1)
    fail(where, "step " + std::to_string(step) + " is not a step number (steps count from 1)",
         "pass 1 for the first update, 2 for the second, ... (the bias corrections depend on it)");
  const double t = static_cast<double>(step);
  return {.beta1 = config.beta1,
          .beta2 = config.beta2,
          .eps = config.eps,
          .decay_factor = decay ? 1 - lr * config.weight_decay : 1.0,
          .step_size = lr / (1 - std::pow(config.beta1, t)),
          .bias_correction2_sqrt = std::sqrt(1 - std::pow(config.beta2, t))};
}

inline void check_same_size(std::string_view where, std::string_view name, std::size_t size,
                            std::string_view param_name, std::size_t param_size) {
  if (size != param_size)
    fail(where,
         std::string(name) + " has " + std::to_string(size) + " elements but " + std::string(param_name) +
             " has " + std::to_string(param_size),
         "pass spans that cover exactly the elements of " + std::string(param_name) +
             " (the same slice of each tensor on this rank)");
}

// One element: updates m and v in place and returns the new parameter value.
inline double adamw_element(const adamw_coefficients& c, double param, double grad, double& m, double& v) {
  param *= c.decay_factor;
  m = c.beta1 * m + (1 - c.beta1) * grad;
  v = c.beta2 * v + (1 - c.beta2) * grad * grad;
  const double denominator = std::sqrt(v) / c.bias_correction2_sqrt + c.eps;
  return param - c.step_size * m / denominator;
}

}  // namespace detail

// One AdamW update of `param` in place; m and v are the first and second moments (zero before step 1).
// All four spans have the same length. Call as adamw_step<float>(...) to pass vectors directly.
template <std::floating_point T>
void adamw_step(std::span<T> param, std::span<const T> grad, std::span<T> m, std::span<T> v,
                const adamw_config& config, std::int64_t step, double lr, bool decay = true) {
  constexpr std::string_view where = "adamw_step";
  detail::check_same_size(where, "grad", grad.size(), "param", param.size());
  detail::check_same_size(where, "m", m.size(), "param", param.size());
  detail::check_same_size(where, "v", v.size(), "param", param.size());
  const auto c = detail::adamw_coefficients_for(where, config, step, lr, decay);
  for (std::size_t i = 0; i < param.size(); ++i) {
    double mi = m[i], vi = v[i];
    const double p = detail::adamw_element(c, param[i], grad[i], mi, vi);
    param[i] = static_cast<T>(p);
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
  }
}

// Mixed precision: f32 master weights, moments and gradients; the bf16 model copy (raw bits) that the
// forward and backward read is rewritten from the updated master, rounded to nearest even.
// The master, m and v end exactly as adamw_step<float> leaves them.
inline void adamw_step_mixed(std::span<float> master, std::span<std::uint16_t> bf16_param,
                             std::span<const float> grad, std::span<float> m, std::span<float> v,
                             const adamw_config& config, std::int64_t step, double lr, bool decay = true) {
  constexpr std::string_view where = "adamw_step_mixed";
  detail::check_same_size(where, "bf16_param", bf16_param.size(), "master", master.size());
  detail::check_same_size(where, "grad", grad.size(), "master", master.size());
  detail::check_same_size(where, "m", m.size(), "master", master.size());
  detail::check_same_size(where, "v", v.size(), "master", master.size());
  const auto c = detail::adamw_coefficients_for(where, config, step, lr, decay);
  for (std::size_t i = 0; i < master.size(); ++i) {
    double mi = m[i], vi = v[i];
    const double p = detail::adamw_element(c, master[i], grad[i], mi, vi);
    master[i] = static_cast<float>(p);
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    bf16_param[i] = float_to_bf16(master[i]);
  }
}

}  // namespace shardgraph
