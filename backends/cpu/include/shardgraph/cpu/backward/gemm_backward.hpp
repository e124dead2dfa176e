#pragma once
// The weight-gradient GEMM, C = A^T B, which the forward gemm cannot express without a transposed
// copy of A. With it and the forward gemm, linear and matmul have all their gradients:
//
// linear, weight_layout::in_out: y (m, n) = x (m, k) w, w (k, n); forward gemm(x, w, y, m, k, n, false)
//   dx (m, k) = dy w^T    gemm(dy, w, dx, m, n, k, /*transpose_b=*/true)
//   dw (k, n) = x^T dy    gemm_at_b(x, dy, dw, m, k, n, accumulate)
// linear, weight_layout::out_in (torch): y (m, n) = x w^T, w (n, k); forward gemm(x, w, y, m, k, n, true)
//   dx (m, k) = dy w      gemm(dy, w, dx, m, n, k, /*transpose_b=*/false)
//   dw (n, k) = dy^T x    gemm_at_b(dy, x, dw, m, n, k, accumulate)
// So dx is always gemm(dy, w, dx, m, n, k, !transpose_b); dw swaps the operands of gemm_at_b with
// the layout. The bias of a linear: bias_backward.hpp.
//
// matmul: c (batch, m, n) = a (batch, m, k) b (batch, k, n); forward batched_gemm(a, b, c, ..., false)
//   da (batch, m, k) = dc b^T   batched_gemm(dc, b, da, batch, m, n, k, /*transpose_b=*/true)
//   db (batch, k, n) = a^T dc   batched_gemm_at_b(a, dc, db, batch, m, k, n, accumulate)
#include <cstdint>

#include <Eigen/Core>

#include "shardgraph/cpu/checks.hpp"
#include "shardgraph/cpu/gemm.hpp"

namespace shardgraph::cpu {

// C (k, n) = A^T B, with A (m, k) and B (m, n): the product summed over the m rows (tokens) that A
// and B share, e.g. a linear's weight gradient x^T dy. accumulate: C += the product, the way a
// parameter gradient sums over layers and micro-batches. C must not overlap A or B. With m == 0
// the product is zero.
template <class T>
void gemm_at_b(const T* a, const T* b, T* c, std::int64_t m, std::int64_t k, std::int64_t n,
               bool accumulate) {
  constexpr auto where = "cpu::gemm_at_b";
  detail::check_size(where, "m", m);
  detail::check_size(where, "k", k);
  detail::check_size(where, "n", n);
  detail::check_pointer(where, "a", a, m * k);
  detail::check_pointer(where, "b", b, m * n);
  detail::check_pointer(where, "c", c, k * n);

  using const_map = Eigen::Map<const row_major_matrix<T>>;
  const_map a_matrix(a, m, k);
  const_map b_matrix(b, m, n);
  Eigen::Map<row_major_matrix<T>> c_matrix(c, k, n);
  if (accumulate) {
    c_matrix.noalias() += a_matrix.transpose() * b_matrix;
  } else {
    c_matrix.noalias() = a_matrix.transpose() * b_matrix;
  }
}

// `batch` independent gemm_at_b: product i reads A at a + i*m*k, B at b + i*m*n and writes C at
// c + i*k*n. The gradient of matmul's right operand.
template <class T>
void batched_gemm_at_b(const T* a, const T* b, T* c, std::int64_t batch, std::int64_t m, std::int64_t k,
                       std::int64_t n, bool accumulate) {
  constexpr auto where = "cpu::batched_gemm_at_b";
  detail::check_size(where, "batch", batch);
  detail::check_size(where, "m", m);
  detail::check_size(where, "k", k);
  detail::check_size(where, "n", n);
  detail::check_pointer(where, "a", a, batch * m * k);
  detail::check_pointer(where, "b", b, batch * m * n);
  detail::check_pointer(where, "c", c, batch * k * n);
  for (std::int64_t i = 0; i < batch; ++i) {
    gemm_at_b(a + i * m * k, b + i * m * n, c + i * k * n, m, k, n, accumulate);
  }
}

}  // namespace shardgraph::cpu
