#pragma once
// Derivatives of the scalar activations (activations.hpp). The gradient of a fused elementwise
// chain is dx = dy * the derivative at the chain's input, element by element.
#include <cmath>

namespace shardgraph::cpu {

// d gelu_tanh / dx = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
// u = sqrt(2/pi) (x + 0.044715 x^3). gelu_tanh_grad(0) == 0.5.
template <class T>
T gelu_tanh_grad(T x) {
  const T sqrt_2_over_pi = T(0.79788456080286535587989211986876);  // sqrt(2 / pi)
  const T cubic = T(0.044715);
  const T tanh_u = std::tanh(sqrt_2_over_pi * (x + cubic * x * x * x));
  const T du_dx = sqrt_2_over_pi * (T(1) + T(3) * cubic * x * x);
  return T(0.5) * (T(1) + tanh_u) + T(0.5) * x * (T(1) - tanh_u * tanh_u) * du_dx;
}

// d silu / dx = s (1 + x (1 - s)), s = sigmoid(x). For very negative x, s is 0 and so is the
// result (never NaN); silu_grad(0) == 0.5.
template <class T>
T silu_grad(T x) {
  const T s = T(1) / (T(1) + std::exp(-x));
  return s * (T(1) + x * (T(1) - s));
}

// d relu / dx = 1 for x > 0, else 0 (0 at x == 0, as torch's threshold_backward).
template <class T>
T relu_grad(T x) {
  return x > T(0) ? T(1) : T(0);
}

// d gelu_erf / dx = Phi(x) + x phi(x) = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi).
// gelu_erf_grad(0) == 0.5.
template <class T>
T gelu_erf_grad(T x) {
  const T one_over_sqrt_2 = T(0.70710678118654752440084436210485);
  const T one_over_sqrt_2_pi = T(0.39894228040143267793994605993438);
  return T(0.5) * (T(1) + std::erf(x * one_over_sqrt_2)) + x * std::exp(T(-0.5) * x * x) * one_over_sqrt_2_pi;
}

// d quick_gelu / dx = s (1 + 1.702 x (1 - s)), s = sigmoid(1.702 x). quick_gelu_grad(0) == 0.5.
template <class T>
T quick_gelu_grad(T x) {
  const T s = T(1) / (T(1) + std::exp(T(-1.702) * x));
  return s * (T(1) + T(1.702) * x * (T(1) - s));
}

}  // namespace shardgraph::cpu
