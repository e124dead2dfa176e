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

// ReLU: max(x, 0); NaN stays NaN.
template <class T>
T relu(T x) {
  return x < T(0) ? T(0) : x;
}

// GELU, exact form: 0.5 x (1 + erf(x / sqrt(2))), torch's approximate='none' (ViT, CLIP, BERT).
// gelu_erf(1.0) == 0.8413447460685429.
template <class T>
T gelu_erf(T x) {
  const T one_over_sqrt_2 = T(0.70710678118654752440084436210485);
  return T(0.5) * x * (T(1) + std::erf(x * one_over_sqrt_2));
}

// QuickGELU: x sigmoid(1.702 x), HF's "quick_gelu" (CLIP). quick_gelu(0) == 0.
template <class T>
T quick_gelu(T x) {
  return x / (T(1) + std::exp(T(-1.702) * x));
}

}  // namespace shardgraph::cpu
