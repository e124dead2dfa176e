#pragma once
// Checking a cpu backward kernel: central finite differences of its forward, in double, and the
// float kernel against the double kernel on the same (rounded) inputs. For a forward y = f(x) and a
// random output gradient dy, the loss L(x) = sum(dy * f(x)) has the gradient the backward kernel
// returns, and (L(x + h e_i) - L(x - h e_i)) / 2h approximates it to O(h^2): with h = 1e-6 the two
// agree within 1e-6, relative to the largest component.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "catch.hpp"

namespace shardgraph::testing::finite_differences {

using vector = std::vector<double>;

constexpr double finite_difference_step = 1e-6;
constexpr double finite_difference_tolerance = 1e-6;
constexpr double float_tolerance = 1e-4;

inline vector random_values(std::int64_t count, unsigned seed, double low = -1, double high = 1) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<double> distribution(low, high);
  vector values(static_cast<std::size_t>(count));
  for (auto& value : values) value = distribution(engine);
  return values;
}

inline std::vector<float> to_float(const vector& values) { return {values.begin(), values.end()}; }

// The values a float kernel sees, back in double: the double kernel's inputs for the float check.
inline vector rounded_to_float(const vector& values) {
  const auto rounded = to_float(values);
  return {rounded.begin(), rounded.end()};
}

inline double dot(const vector& a, const vector& b) {
  REQUIRE(a.size() == b.size());
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// max |got - want| / max |want|: the error relative to the scale of the result.
template <class T>
double relative_error(const std::vector<T>& got, const vector& want) {
  REQUIRE(got.size() == want.size());
  double largest_error = 0;
  double largest_value = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    largest_error = std::max(largest_error, std::abs(double(got[i]) - want[i]));
    largest_value = std::max(largest_value, std::abs(want[i]));
  }
  return largest_error / std::max(largest_value, 1e-300);
}

// The central-difference gradient of loss at x.
inline vector numeric_gradient(const std::function<double(const vector&)>& loss, vector x) {
  vector gradient(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + finite_difference_step;
    const double plus = loss(x);
    x[i] = saved - finite_difference_step;
    const double minus = loss(x);
    x[i] = saved;
    gradient[i] = (plus - minus) / (2 * finite_difference_step);
  }
  return gradient;
}

// An attention backward's three gradients: gradients(q, k, v, dout) -> {dq, dk, dv} (a generic
// callable, run in double and in float) against finite differences of loss(q, k, v) = dout . out,
// and in float against double on the rounded inputs. Returns the double gradients.
template <class Loss, class Gradients>
std::array<vector, 3> check_attention_gradients(const vector& q, const vector& k, const vector& v, const vector& dout,
                                                Loss&& loss, Gradients&& gradients) {
  const auto [dq, dk, dv] = gradients(q, k, v, dout);
  CHECK(relative_error(dq, numeric_gradient([&](const vector& x) { return loss(x, k, v); }, q)) <=
        finite_difference_tolerance);
  CHECK(relative_error(dk, numeric_gradient([&](const vector& x) { return loss(q, x, v); }, k)) <=
        finite_difference_tolerance);
  CHECK(relative_error(dv, numeric_gradient([&](const vector& x) { return loss(q, k, x); }, v)) <=
        finite_difference_tolerance);

  const auto [dq_float, dk_float, dv_float] = gradients(to_float(q), to_float(k), to_float(v), to_float(dout));
  const auto [dq_rounded, dk_rounded, dv_rounded] =
      gradients(rounded_to_float(q), rounded_to_float(k), rounded_to_float(v), rounded_to_float(dout));
  CHECK(relative_error(dq_float, dq_rounded) <= float_tolerance);
  CHECK(relative_error(dk_float, dk_rounded) <= float_tolerance);
  CHECK(relative_error(dv_float, dv_rounded) <= float_tolerance);
  return {dq, dk, dv};
}

}  // namespace shardgraph::testing::finite_differences
