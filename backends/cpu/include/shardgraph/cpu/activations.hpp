#pragma once
// Scalar activations; the executor's fused elementwise chains call these per element.
#include <cmath>

namespace shardgraph::cpu {

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// This is HF's "gelu_new" (GPT-2), not the erf form. gelu_tanh(1.0) == 0.8411919906082768.
template <class T>
T gelu_tanh(T x) {
  const T sqrt_2_over_pi = T(0.79788456080286535587989211986876);  // sqrt(2 / pi)
  const T cubic = T(0.044715);
  return T(0.5) * x * (T(1) + std::tanh(sqrt_2_over_pi * (x + cubic * x * x * x)));
}

// SiLU (swish): x * sigmoid(x) = x / (1 + exp(-x)). For very negative x, exp(-x) is inf and the
// result is -0, the limit.
template <class T>
T silu(T x) {
  return x / (T(1) + std::exp(-x));
}

}  // namespace shardgraph::cpu
