#pragma once
// What a product run by gemm_runner (gemm.hpp) is: matmul_problem, a batch of row-major products
// with their element types and epilogue; gemm_shape, a linear layer's product; the operands an
// epilogue reads or writes; and how (gemm_choice), and with what result (gemm_choice_report), a
// plan's algorithm is chosen.
#include <cstdint>
#include <string>
#include <vector>

namespace shardgraph::cuda {

enum class element { f32, bf16, f16, f64 };
// bias_grad_of_b / bias_grad_of_a: besides C, the column sums of op(B) over k (n values) / of op(A)
// over k (m values) into the `bias` pointer, in C's type: a linear's bias gradient, summed over the
// tokens as its weight gradient reads them (cuBLASLt's BGRADA / BGRADB on its swapped operands).
// gelu_aux / bias_gelu_aux: gelu and bias_gelu that also write the pre-activation (C's shape and
// type) to epilogue_operands::aux; gelu_grad: C = (alpha op(A) op(B)) * gelu'(aux), aux the
// activation's input (cuBLASLt's GELU_AUX, GELU_AUX_BIAS, DGELU); gelu_grad_bias_grad: gelu_grad
// that also writes C's column sums (n values: over the m rows, the tokens) to the `bias` pointer,
// the bias gradient of the layer before the GELU (cuBLASLt's DGELU_BGRAD).
enum class epilogue {
  none,
  bias,
  gelu,
  bias_gelu,
  bias_grad_of_b,
  bias_grad_of_a,
  gelu_aux,
  bias_gelu_aux,
  gelu_grad,
  gelu_grad_bias_grad
};

// What an epilogue reads or writes besides C: the bias (read, or written by bias_grad_*), aux (see
// epilogue), and the addend: the matrix beta scales when it is not C itself (C = ... + beta addend).
struct epilogue_operands {
  const void* bias = nullptr;
  const void* aux = nullptr;
  const void* addend = nullptr;
};

// How a plan's algorithm is chosen (see the header comment).
enum class gemm_choice { heuristic, timed };

// A gemm_runner's timed choices: each timed plan (named as its first call named it) with the
// median milliseconds of the heuristic's first answer and of the chosen one (equal: kept).
struct gemm_timed_plan {
  std::string what;
  double first_ms = 0, chosen_ms = 0;
};
struct gemm_choice_report {
  std::vector<gemm_timed_plan> plans;
  int changed() const {
    int n = 0;
    for (const gemm_timed_plan& p : plans) n += p.chosen_ms < p.first_ms ? 1 : 0;
    return n;
  }
  double first_ms() const {
    double ms = 0;
    for (const gemm_timed_plan& p : plans) ms += p.first_ms;
    return ms;
  }
  double chosen_ms() const {
    double ms = 0;
    for (const gemm_timed_plan& p : plans) ms += p.chosen_ms;
    return ms;
  }
};

struct gemm_shape {
  std::int64_t m = 0, n = 0, k = 0;
  element type = element::f32;
  epilogue post = epilogue::none;
};

// C[i] = alpha op(A[i]) op(B[i]) + beta C[i] (+ bias (n) per row), i < batch, all row-major:
// op(A) is (m, k): A is stored (m, k), or (k, m) when transpose_a; op(B) is (k, n): B is stored
// (k, n), or (n, k) when transpose_b. Strides are in elements between consecutive A[i], B[i], C[i]
// (0: one matrix for every i, as q's, k's and v's products share their input), and between the
// products' biases (bias gradients).
struct matmul_problem {
  std::int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  element a_type = element::f32, b_type = element::f32, c_type = element::f32;
  epilogue post = epilogue::none;
  std::int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  std::int64_t stride_bias = 0;
  double alpha = 1, beta = 0;
};

}  // namespace shardgraph::cuda
