// AdamW against torch.optim.AdamW's documented algorithm, written out below in plain double arithmetic,
// and against numbers derived by hand; the mixed-precision variant against the f32 one.
#include "shardgraph/optim/adamw.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include "catch.hpp"
#include "shardgraph/core/half.hpp"

namespace sg = shardgraph;
using sg::testing::contains;
using sg::testing::error_of;

namespace {

// torch.optim.AdamW's documented algorithm, step t (1-based):
//   theta <- theta - gamma * lambda * theta
//   m <- beta1 m + (1 - beta1) g;   v <- beta2 v + (1 - beta2) g^2
//   m_hat = m / (1 - beta1^t);      v_hat = v / (1 - beta2^t)
//   theta <- theta - gamma * m_hat / (sqrt(v_hat) + eps)
struct reference_adamw {
  std::vector<double> param, m, v;

  void step(const std::vector<double>& grad, const sg::adamw_config& c, int t, double lr, bool decay) {
    for (std::size_t i = 0; i < param.size(); ++i) {
      if (decay) param[i] = param[i] - lr * c.weight_decay * param[i];
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * grad[i];
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * grad[i] * grad[i];
      const double m_hat = m[i] / (1 - std::pow(c.beta1, t));
      const double v_hat = v[i] / (1 - std::pow(c.beta2, t));
      param[i] = param[i] - lr * m_hat / (std::sqrt(v_hat) + c.eps);
    }
  }
};

const std::vector<double> initial_param = {0.5, -1.25, 0.0, 2.0, 1e-3};
const std::vector<std::vector<double>> grads = {
    {0.1, -0.2, 0.3, 1e-9, -4.0}, {-0.05, 0.4, 0.0, 2e-9, 3.0}, {0.2, 0.1, -0.7, -1e-9, 0.5}};
const std::vector<double> learning_rates = {1e-3, 3e-3, 2e-3};

template <class T>
std::vector<T> as(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

}  // namespace

TEST_CASE("adamw_step in double matches torch's algorithm for 3 steps, with and without decay", "[optim]") {
  const sg::adamw_config config;  // the defaults: beta 0.9/0.95, eps 1e-8, wd 0.1
  for (const bool decay : {true, false}) {
    CAPTURE(decay);
    reference_adamw ref{initial_param, std::vector<double>(5, 0.0), std::vector<double>(5, 0.0)};
    std::vector<double> param = initial_param, m(5, 0.0), v(5, 0.0);
    for (int t = 1; t <= 3; ++t) {
      const double lr = learning_rates[static_cast<std::size_t>(t - 1)];
      ref.step(grads[static_cast<std::size_t>(t - 1)], config, t, lr, decay);
      sg::adamw_step<double>(param, grads[static_cast<std::size_t>(t - 1)], m, v, config, t, lr, decay);
      for (std::size_t i = 0; i < param.size(); ++i) {
        CAPTURE(t, i);
        CHECK(param[i] == Approx(ref.param[i]).epsilon(1e-13).margin(1e-300));
        CHECK(m[i] == Approx(ref.m[i]).epsilon(1e-13).margin(1e-300));
        CHECK(v[i] == Approx(ref.v[i]).epsilon(1e-13).margin(1e-300));
      }
    }
  }
}

TEST_CASE("adamw_step in float matches torch's algorithm to float precision", "[optim]") {
  const sg::adamw_config config{.lr = 1e-3, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.5};
  reference_adamw ref{initial_param, std::vector<double>(5, 0.0), std::vector<double>(5, 0.0)};
  std::vector<float> param = as<float>(initial_param), m(5, 0.0f), v(5, 0.0f);
  for (int t = 1; t <= 3; ++t) {
    const double lr = learning_rates[static_cast<std::size_t>(t - 1)];
    ref.step(grads[static_cast<std::size_t>(t - 1)], config, t, lr, true);
    sg::adamw_step<float>(param, as<float>(grads[static_cast<std::size_t>(t - 1)]), m, v, config, t, lr);
    for (std::size_t i = 0; i < param.size(); ++i) {
      CAPTURE(t, i);
      CHECK(param[i] == Approx(ref.param[i]).epsilon(1e-6).margin(1e-9));
    }
  }
}

TEST_CASE("adamw_step by hand: three steps with round numbers", "[optim]") {
  // beta1 0.5, beta2 0.75, eps 0, lr 1. Element 0 without decay from 0; element 1 with wd 0.5 from 1.
  // grads 2, -2, 2 on both.
  //   t=1: m = 0.5*2 = 1;              v = 0.25*4 = 1
  //        m_hat = 1/(1-0.5) = 2;      v_hat = 1/(1-0.75) = 4;        update = 2/sqrt(4) = 1
  //   t=2: m = 0.5*1 + 0.5*(-2) = -0.5; v = 0.75*1 + 0.25*4 = 1.75
  //        m_hat = -0.5/0.75 = -2/3;   v_hat = 1.75/0.4375 = 4;       update = -1/3
  //   t=3: m = 0.5*(-0.5) + 0.5*2 = 0.75; v = 0.75*1.75 + 0.25*4 = 2.3125
  //        m_hat = 0.75/0.875 = 6/7;   v_hat = 2.3125/0.578125 = 4;   update = 3/7
  //   element 0: 0 - 1 = -1;  -1 + 1/3 = -2/3;  -2/3 - 3/7 = -23/21
  //   element 1 (param *= 1 - 1*0.5 first): 0.5 - 1 = -1/2;  -1/4 + 1/3 = 1/12;  1/24 - 3/7 = -65/168
  const sg::adamw_config config{.lr = 1, .beta1 = 0.5, .beta2 = 0.75, .eps = 0, .weight_decay = 0.5};
  std::vector<double> plain = {0.0}, decayed = {1.0}, m0(1), v0(1), m1(1), v1(1);
  const double g[3] = {2, -2, 2};
  const double expected_plain[3] = {-1.0, -2.0 / 3, -23.0 / 21};
  const double expected_decayed[3] = {-0.5, 1.0 / 12, -65.0 / 168};
  const double expected_m[3] = {1, -0.5, 0.75}, expected_v[3] = {1, 1.75, 2.3125};
  for (int t = 1; t <= 3; ++t) {
    const std::vector<double> grad = {g[t - 1]};
    sg::adamw_step<double>(plain, grad, m0, v0, config, t, 1.0, /*decay=*/false);
    sg::adamw_step<double>(decayed, grad, m1, v1, config, t, 1.0, /*decay=*/true);
    CAPTURE(t);
    CHECK(plain[0] == Approx(expected_plain[t - 1]).epsilon(1e-15));
    CHECK(decayed[0] == Approx(expected_decayed[t - 1]).epsilon(1e-15));
    CHECK(m0[0] == expected_m[t - 1]);
    CHECK(v0[0] == expected_v[t - 1]);
  }
}

TEST_CASE("adamw_step bias correction: the first step moves each element by lr, whatever its gradient's size",
          "[optim]") {
  // At t=1, m_hat = g and v_hat = g^2, so the update is lr * g / (|g| + eps): about lr * sign(g).
  // Without the corrections it would be lr * 0.1 g / (sqrt(0.05) |g| + eps) = 0.447 lr.
  // lr 0.01:  g = 1e3:  0.01 / (1 + 1e-11) = 0.0099999999999
  //           g = -1:   0.01 / (1 + 1e-8)  = 0.0099999999000
  //           g = 1e-3: 0.01 / (1 + 1e-5)  = 0.0099999000010
  const sg::adamw_config config;
  std::vector<double> param = {0.0, 0.0, 0.0, 0.0}, m(4), v(4);
  const std::vector<double> grad = {1e3, -1.0, 1e-3, 0.0};
  sg::adamw_step<double>(param, grad, m, v, config, 1, 0.01);
  CHECK(param[0] == Approx(-0.0099999999999).epsilon(1e-12));
  CHECK(param[1] == Approx(0.0099999999000).epsilon(1e-12));
  CHECK(param[2] == Approx(-0.0099999000010).epsilon(1e-12));
  CHECK(param[3] == 0.0);  // zero gradient, eps > 0: no movement (and no NaN)
}

TEST_CASE("adamw_step weight decay: decoupled, scaled by lr, off when asked", "[optim]") {
  // A zero gradient leaves only the decay: param *= 1 - lr * wd = 1 - 0.01 * 0.1 = 0.999.
  const sg::adamw_config config;
  std::vector<float> param = {2.0f, -4.0f}, m(2), v(2);
  const std::vector<float> zero(2, 0.0f);
  sg::adamw_step<float>(param, zero, m, v, config, 1, 0.01);
  CHECK(param[0] == Approx(1.998));
  CHECK(param[1] == Approx(-3.996));
  sg::adamw_step<float>(param, zero, m, v, config, 2, 0.01, /*decay=*/false);
  CHECK(param[0] == Approx(1.998));
  CHECK(param[1] == Approx(-3.996));
}

TEST_CASE("adamw_step_mixed equals adamw_step<float>, then rounded to bf16", "[optim]") {
  const sg::adamw_config config;
  std::vector<float> master = as<float>(initial_param), m(5), v(5);
  std::vector<float> reference = master, reference_m(5), reference_v(5);
  std::vector<std::uint16_t> bf16(5, 0);
  for (int t = 1; t <= 3; ++t) {
    const double lr = learning_rates[static_cast<std::size_t>(t - 1)];
    const auto grad = as<float>(grads[static_cast<std::size_t>(t - 1)]);
    sg::adamw_step<float>(reference, grad, reference_m, reference_v, config, t, lr, t != 2);
    sg::adamw_step_mixed(master, bf16, grad, m, v, config, t, lr, t != 2);
    CHECK(master == reference);
    CHECK(m == reference_m);
    CHECK(v == reference_v);
    for (std::size_t i = 0; i < bf16.size(); ++i) CHECK(bf16[i] == sg::float_to_bf16(reference[i]));
  }
  // The bf16 copy is a rounding of the master, which keeps the small updates bf16 would lose.
  CHECK(sg::bf16_to_float(bf16[4]) != master[4]);
}

TEST_CASE("adamw_step rejects mismatched sizes and bad hyperparameters with where/why/how", "[optim]") {
  const sg::adamw_config config;
  std::vector<float> param(4), grad(4), m(4), v(4), short_v(3);
  std::vector<std::uint16_t> bf16(4), short_bf16(5);

  auto e = error_of([&] { sg::adamw_step<float>(param, grad, m, short_v, config, 1, 1e-3); });
  CHECK(contains(e, "shardgraph: adamw_step: v has 3 elements but param has 4"));
  e = error_of([&] { sg::adamw_step<float>(param, std::vector<float>(5), m, v, config, 1, 1e-3); });
  CHECK(contains(e, "grad has 5 elements but param has 4"));
  e = error_of([&] { sg::adamw_step_mixed(param, short_bf16, grad, m, v, config, 1, 1e-3); });
  CHECK(contains(e, "shardgraph: adamw_step_mixed: bf16_param has 5 elements but master has 4"));
  CHECK(contains(e, "pass spans that cover exactly the elements of master"));

  e = error_of([&] { sg::adamw_step<float>(param, grad, m, v, config, 0, 1e-3); });
  CHECK(contains(e, "step 0 is not a step number (steps count from 1)"));
  e = error_of([&] { sg::adamw_step_mixed(param, bf16, grad, m, v, config, -3, 1e-3); });
  CHECK(contains(e, "shardgraph: adamw_step_mixed: step -3"));
  e = error_of([&] { sg::adamw_step<float>(param, grad, m, v, config, 1, -1e-3); });
  CHECK(
      contains(e, "shardgraph: adamw_step: lr is -0.001000, outside [0, inf). give lr a value in [0, inf)"));
  e = error_of([&] { sg::adamw_step<float>(param, grad, m, v, config, 1, std::nan("")); });
  CHECK(contains(e, "lr is nan"));
  e = error_of([&] { sg::adamw_step<float>(param, grad, m, v, {.beta1 = 1.0}, 1, 1e-3); });
  CHECK(contains(e, "beta1 is 1.000000, outside [0, 1)"));
  e = error_of([&] { sg::adamw_step<float>(param, grad, m, v, {.beta2 = -0.1}, 1, 1e-3); });
  CHECK(contains(e, "beta2 is -0.100000, outside [0, 1)"));
  e = error_of([&] { sg::adamw_step<float>(param, grad, m, v, {.eps = -1}, 1, 1e-3); });
  CHECK(contains(e, "eps is -1.000000"));
  e = error_of([&] { sg::adamw_step<float>(param, grad, m, v, {.weight_decay = -0.1}, 1, 1e-3); });
  CHECK(contains(e, "weight_decay is -0.100000"));
  // A failed check leaves everything untouched.
  CHECK(param == std::vector<float>(4));

  std::vector<double> empty;
  CHECK(error_of([&] { sg::adamw_step<double>(empty, empty, empty, empty, config, 1, 1e-3); }) ==
        "(no error)");
}
