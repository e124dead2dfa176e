#pragma once
// The matrix products of cuda::backend's calls on cuBLASLt (gemm.hpp): linear (with its bias, and a
// compute::product_epilogue, in cuBLASLt's epilogue where it has one), matmul, and linear's weight
// gradient (with its bias gradient), each possibly a strided batch (kernel_call::batch).
//
//   linear              {m, k, n}     x (m, k) . w (k, n) [or w^T (n, k)] (+ bias (n)) -> (m, n)
//   matmul              {b, m, k, n}  a (b, m, k) . b (b, k, n) -> (b, m, n)
//   linear_weight_grad  {rows, k, n}  x^T (k, rows) . dy (rows, n) -> (k, n) [or dy^T x: (n, k)]
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/compute/lower_fused.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/column_sums.hpp>
#include <shardgraph/cuda/gemm.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/elementwise.cuh>
#include <shardgraph/cuda/tensor_buffer.hpp>
#include <shardgraph/cuda/text.hpp>
#include <shardgraph/ir/op.hpp>

#include <array>
#include <cstdint>
#include <string_view>

namespace shardgraph::cuda::detail {

inline element element_of(dtype t, std::string_view what) {
  switch (t) {
    case dtype::f64:
      return element::f64;
    case dtype::f32:
      return element::f32;
    case dtype::bf16:
      return element::bf16;
    case dtype::f16:
      return element::f16;
    default:
      break;
  }
  fail(text("cuda::backend: ", what), text("a matrix product of ", dtype_name(t), " values"),
       "give matrix products floating values");
}

// C (m, n) = op(A) op(B), row-major, batched: see matmul_problem.
inline void product(backend_state& s, const void* a, dtype at, const void* b, dtype bt, void* c, dtype ct,
                    matmul_problem p, std::string_view what, const void* bias = nullptr) {
  p.a_type = element_of(at, what);
  p.b_type = element_of(bt, what);
  p.c_type = element_of(ct, what);
  s.gemm.run(p, a, b, c, bias, s.stream,
             text("cuda::backend: ", what, " (", p.m, " x ", p.k, ") . (", p.k, " x ", p.n, ") x ", p.batch));
}

// product(), with an epilogue cuBLASLt may have no algorithm for: false (nothing run) then.
inline bool product_if_supported(backend_state& s, const void* a, dtype at, const void* b, dtype bt, void* c,
                                 dtype ct, matmul_problem p, std::string_view what,
                                 const epilogue_operands& e) {
  p.a_type = element_of(at, what);
  p.b_type = element_of(bt, what);
  p.c_type = element_of(ct, what);
  return s.gemm.try_run(
      p, a, b, c, e, s.stream,
      text("cuda::backend: ", what, " (", p.m, " x ", p.k, ") . (", p.k, " x ", p.n, ") x ", p.batch), true);
}

// A batched product (kernel_call::batch) that one cuBLASLt call runs: 16-bit or f32, no empty
// dimension, the bias in the epilogue (a linear's, with no other epilogue) or the bias gradient in
// the same dtype as the product.
inline bool batch_fits(const kernel_call& c) {
  if (c.out->type() == dtype::f64 || c.dims[0] == 0 || c.dims[1] == 0 || c.dims[2] == 0) return false;
  if (c.kind == op::linear) return c.epilogue == compute::product_epilogue::none;
  return c.kind == op::linear_weight_grad && (c.bias_grad == nullptr || c.bias_grad->type() == c.out->type());
}

// A weight gradient with its bias gradient that one call takes: a product's or a layer norm's, with
// no empty dimension.
inline bool bias_grad_epilogue_fits(const kernel_call& c) {
  if (c.out->numel() == 0 || c.bias_grad->numel() == 0 || c.dims[0] == 0 || c.dims[1] == 0) return false;
  if (c.kind == op::layer_norm_grad_w) return c.bias_grad->type() == c.out->type();
  return c.kind == op::linear_weight_grad && c.dims[2] > 0;
}

// A linear with no epilogue. The bias in cuBLASLt's epilogue, except in f64 (added by a second pass
// there). A batch (kernel_call::batch, never f64) shares x: its stride is 0.
template <class C, class I>
void linear(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  const bool fused_bias = c.bias != nullptr && o.type() != dtype::f64;
  product(s, c.in[0]->data(), c.in[0]->type(), c.in[1]->data(), c.in[1]->type(), o.data(), o.type(),
          {.m = d[0],
           .n = d[2],
           .k = d[1],
           .transpose_b = c.transpose_b,
           .post = fused_bias ? epilogue::bias : epilogue::none,
           .batch = c.batch,
           .stride_b = c.batch_strides[0],
           .stride_c = c.batch_strides[1],
           .stride_bias = c.batch_strides[2]},
          c.batch > 1 ? "linear (batched)" : "linear", fused_bias ? c.bias->data() : nullptr);
  if (c.bias == nullptr || fused_bias) return;
  kernels::chain_args a;
  a.out = out(o);
  a.operands[0] = in(o);
  a.operands[1] = in(*c.bias);
  a.steps[0] = {op::add_bias, 1, d[2]};
  a.length = 1;
  a.numel = o.numel();
  kernels::chain_kernel<C, I><<<kernels::blocks_for(a.numel, 256), 256, 0, s.stream>>>(a);
}

// A linear with a compute::product_epilogue in one cuBLASLt call (GELU_AUX[_BIAS], DGELU, or beta 1
// with the side as addend) where cuBLASLt has one for these sizes and alignments and every buffer
// has the output's 16-bit or f32 type. False (nothing run): the caller runs the product, then the
// elementwise kernel it stands for (compute::split_epilogue).
inline bool linear_epilogue_in_product(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  bool same_types = o.type() != dtype::f64 && c.in[0]->type() == o.type() && c.in[1]->type() == o.type();
  for (const tensor_buffer* b : {static_cast<const tensor_buffer*>(c.side), c.bias})
    same_types = same_types && (b == nullptr || b->type() == o.type());
  const bool bias = c.bias != nullptr,
             gradient_with_bias = bias && c.epilogue == compute::product_epilogue::gelu_grad;
  if (!same_types || gradient_with_bias) return false;
  matmul_problem p{.m = d[0], .n = d[2], .k = d[1], .transpose_b = c.transpose_b};
  epilogue_operands e{.bias = bias ? c.bias->data() : nullptr};
  switch (c.epilogue) {
    case compute::product_epilogue::gelu:
      if (c.side != nullptr) e.aux = c.side->data();
      p.post = c.side != nullptr ? (bias ? epilogue::bias_gelu_aux : epilogue::gelu_aux)
                                 : (bias ? epilogue::bias_gelu : epilogue::gelu);
      break;
    case compute::product_epilogue::gelu_grad:
      p.post = epilogue::gelu_grad;
      e.aux = c.side->data();
      break;
    case compute::product_epilogue::add:
      p.post = bias ? epilogue::bias : epilogue::none;
      p.beta = 1;
      e.addend = c.side->data();
      break;
    case compute::product_epilogue::none:
      break;
  }
  return product_if_supported(s, c.in[0]->data(), c.in[0]->type(), c.in[1]->data(), c.in[1]->type(), o.data(),
                              o.type(), p, "linear with epilogue", e);
}

inline void matmul(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  product(s, c.in[0]->data(), c.in[0]->type(), c.in[1]->data(), c.in[1]->type(), o.data(), o.type(),
          {.m = d[1],
           .n = d[3],
           .k = d[2],
           .batch = d[0],
           .stride_a = d[1] * d[2],
           .stride_b = d[2] * d[3],
           .stride_c = d[1] * d[3]},
          "matmul");
}

// x (rows, k), dy (rows, n): (k, n) = x^T dy, or (n, k) = dy^T x. kernel_call::bias_grad: dy's
// column sums by the column-sum kernels after the product, or (`bias_grad_in_product`) in its
// epilogue where cuBLASLt has one (16-bit and f32). A batch (kernel_call::batch) shares x (stride
// 0) and strides dy, the result and the bias gradient: one batched product, then each member's
// column sums. The caller checked that no dimension is empty.
template <class C>
void linear_weight_grad(backend_state& s, const kernel_call& c, bool bias_grad_in_product) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  const bool sums = c.bias_grad != nullptr;
  matmul_problem p = c.transpose_b ? matmul_problem{.m = d[2], .n = d[1], .k = d[0], .transpose_a = true}
                                   : matmul_problem{.m = d[1], .n = d[2], .k = d[0], .transpose_a = true};
  const tensor_buffer& a = c.transpose_b ? *c.in[1] : *c.in[0];
  const tensor_buffer& b = c.transpose_b ? *c.in[0] : *c.in[1];
  p.batch = c.batch;
  (c.transpose_b ? p.stride_a : p.stride_b) = c.batch_strides[0];
  p.stride_c = c.batch_strides[1];
  p.stride_bias = c.batch_strides[2];
  if (sums && bias_grad_in_product && o.type() != dtype::f64 && c.bias_grad->type() == o.type()) {
    p.post = c.transpose_b ? epilogue::bias_grad_of_a : epilogue::bias_grad_of_b;
    if (product_if_supported(s, a.data(), a.type(), b.data(), b.type(), o.data(), o.type(), p,
                             c.batch > 1 ? "linear_weight_grad with bias gradient (batched)"
                                         : "linear_weight_grad with bias gradient",
                             {.bias = c.bias_grad->data()}))
      return;
  }
  p.post = epilogue::none;
  product(s, a.data(), a.type(), b.data(), b.type(), o.data(), o.type(), p, "linear_weight_grad");
  std::array<tensor_buffer, 3> views;  // each member's dy into its own bias gradient
  for (std::int64_t k = 0; sums && k < c.batch; ++k) {
    const kernel_call member = compute::batch_member(c, k, views);
    column_sums_of<C>(s, out(*member.bias_grad), d[0], d[2], in(member, 1));
  }
}

}  // namespace shardgraph::cuda::detail
