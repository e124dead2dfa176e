#pragma once
// GEMMs over row-major buffers, evaluated by Eigen.
#include <cstdint>

#include <Eigen/Core>

#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

template <class T>
using row_major_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// C (m, n) = A (m, k) * B (k, n)               if !transpose_b
// C (m, n) = A (m, k) * B^T, with B (n, k)     if transpose_b (a torch Linear weight is (out, in))
// accumulate: C += the product instead of C = the product.
// C must not overlap A or B. With k == 0 the product is zero.
template <class T>
void gemm(const T* a, const T* b, T* c, std::int64_t m, std::int64_t k, std::int64_t n, bool transpose_b,
          bool accumulate = false) {
  constexpr auto where = "cpu::gemm";
  detail::check_size(where, "m", m);
  detail::check_size(where, "k", k);
  detail::check_size(where, "n", n);
  detail::check_pointer(where, "a", a, m * k);
  detail::check_pointer(where, "b", b, k * n);
  detail::check_pointer(where, "c", c, m * n);

  using const_map = Eigen::Map<const row_major_matrix<T>>;
  const_map a_matrix(a, m, k);
  Eigen::Map<row_major_matrix<T>> c_matrix(c, m, n);
  if (transpose_b) {
    const_map b_matrix(b, n, k);
    if (accumulate) {
      c_matrix.noalias() += a_matrix * b_matrix.transpose();
    } else {
      c_matrix.noalias() = a_matrix * b_matrix.transpose();
    }
  } else {
    const_map b_matrix(b, k, n);
    if (accumulate) {
      c_matrix.noalias() += a_matrix * b_matrix;
    } else {
      c_matrix.noalias() = a_matrix * b_matrix;
    }
  }
}

// `batch` independent gemms: product i reads A at a + i*m*k, B at b + i*k*n (B is (n, k) if
// transpose_b) and writes C at c + i*m*n. Used for attention's per-head products.
template <class T>
void batched_gemm(const T* a, const T* b, T* c, std::int64_t batch, std::int64_t m, std::int64_t k,
                  std::int64_t n, bool transpose_b, bool accumulate = false) {
  constexpr auto where = "cpu::batched_gemm";
  detail::check_size(where, "batch", batch);
  detail::check_size(where, "m", m);
  detail::check_size(where, "k", k);
  detail::check_size(where, "n", n);
  detail::check_pointer(where, "a", a, batch * m * k);
  detail::check_pointer(where, "b", b, batch * k * n);
  detail::check_pointer(where, "c", c, batch * m * n);
  for (std::int64_t i = 0; i < batch; ++i) {
    gemm(a + i * m * k, b + i * k * n, c + i * m * n, m, k, n, transpose_b, accumulate);
  }
}

}  // namespace shardgraph::cpu
