#pragma once
// cuda::backend's calls that map elements or rows to elements: the fused elementwise chains
// (add, mul, add_bias, gelu, silu, relu, gelu_erf, quick_gelu), the activations' gradients, the heads'
// permutes, rope, the transpose and the permute, the row softmax and its gradient, and `ones`. The vector kernels
// (kernels/vectorized.cuh) take them where every buffer is 16-byte aligned whole vectors.
//
//   chain                     {numel}                           operands -> (numel)
//   gelu_grad, silu_grad, relu_grad, gelu_erf_grad  {numel}    x, dy -> dx
//   quick_gelu_grad           {numel}                           x, dy -> dx
//   split_heads, merge_heads  {batch, seq, heads, head_dim}     (b, s, h, d) <-> (b, h, s, d)
//   rope, rope_grad           {batch, heads, seq, head_dim}     x -> x rotated by kernel_call::rope
//   transpose                 {batch, rows, cols}               (b, rows, cols) -> (b, cols, rows)
//   permute                   {d0, d1, d2, d3, order}           x (d0, d1, d2, d3) permuted by order
//   dropout                   {d0, d1, d2, d3}                  x -> x masked and scaled (kernel_call::dropout)
//   softmax, softmax_grad     {rows, cols}                      x [, dy] -> (rows, cols)
#include <shardgraph/compute/permute_order.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/dropout.cuh>
#include <shardgraph/cuda/kernels/elementwise.cuh>
#include <shardgraph/cuda/kernels/layout.cuh>
#include <shardgraph/cuda/kernels/norms.cuh>
#include <shardgraph/cuda/kernels/softmax.cuh>
#include <shardgraph/cuda/kernels/vectorized.cuh>
#include <shardgraph/cuda/tensor_buffer.hpp>
#include <shardgraph/ir/op.hpp>

#include <cstdint>
#include <string>

namespace shardgraph::cuda::detail {

template <class C, class I>
void run_chain(backend_state& s, const kernels::chain_args& a) {
  const unsigned threads = 256;
  if (!vector_ready(a))
    return kernels::chain_kernel<C, I><<<kernels::blocks_for(a.numel, threads), threads, 0, s.stream>>>(a);
  const unsigned grid = kernels::blocks_for(a.numel / vector_lanes(a.out.type), threads);
  with_vector_types(a.out.type, [&]<class T, class V>() {
    kernels::chain_vector_kernel<T, V, I><<<grid, threads, 0, s.stream>>>(a);
  });
}

// A call's chain of elementwise steps (kernel_call::chain over kernel_call::operands).
template <class C, class I>
void elementwise_chain(backend_state& s, const kernel_call& c) {
  kernels::chain_args a;
  a.out = out(*c.out);
  for (int k = 0; k < c.operand_count; ++k) a.operands[k] = in(*c.operands[k]);
  for (int st = 0; st < c.chain_length; ++st) a.steps[st] = c.chain[st];
  a.length = c.chain_length;
  a.numel = c.dims[0];
  run_chain<C, I>(s, a);
}

template <class C, op Grad, class I>
void activation_grad(backend_state& s, const kernel_call& c) {
  const unsigned threads = 256;
  const kernels::ref x = in(c, 0), dy = in(c, 1);
  const kernels::mut_ref o = out(*c.out);
  const std::int64_t n = c.dims[0];
  if (!vector_ready(o.type, n, {x, dy, o}))
    return kernels::activation_grad_kernel<C, Grad, I>
        <<<kernels::blocks_for(n, threads), threads, 0, s.stream>>>(x, dy, o, n);
  const unsigned grid = kernels::blocks_for(n / vector_lanes(o.type), threads);
  with_vector_types(o.type, [&]<class T, class V>() {
    kernels::activation_grad_vector_kernel<T, V, Grad, I><<<grid, threads, 0, s.stream>>>(
        static_cast<const T*>(x.data), static_cast<const T*>(dy.data), static_cast<T*>(o.data), n);
  });
}

// split_heads / merge_heads: x (batch, seq, heads, head_dim) <-> (batch, heads, seq, head_dim).
template <class C, bool Split, class I>
void heads(backend_state& s, const kernel_call& c) {
  const unsigned threads = 256;
  const std::int64_t* d = c.dims;
  const kernels::ref x = in(c, 0);
  const kernels::mut_ref y = out(*c.out);
  const std::int64_t numel = c.out->numel();
  if (!vector_ready(y.type, d[3], {x, y}))
    return kernels::heads_kernel<C, Split, I>
        <<<kernels::blocks_for(numel, threads), threads, 0, s.stream>>>(x, y, d[1], d[2], d[3], numel);
  const std::int64_t lanes = vector_lanes(y.type), vectors = numel / lanes;
  kernels::heads_vector_kernel<Split, I><<<kernels::blocks_for(vectors, threads), threads, 0, s.stream>>>(
      static_cast<const uint4*>(x.data), static_cast<uint4*>(y.data), d[1], d[2], d[3] / lanes, vectors);
}

template <class C, class I>
void rope(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  if (c.rope == nullptr || c.rope->pairs != d[3] / 2)
    fail("cuda::backend: " + std::string(op_name(c.kind)),
         "the call carries no frequency table (kernel_call::rope) for head_dim " + std::to_string(d[3]),
         "set it to a compute::make_rope_frequencies table, as the executor does at bind");
  kernels::token_positions positions;  // a generation program's rope reads kv_context (in[1])
  if (c.kind == op::rope && c.in[1] != nullptr)
    positions = {static_cast<const std::int32_t*>(c.in[1]->data()), c.in[1]->numel() / d[0], d[1]};
  kernels::rope_kernel<C, I><<<kernels::blocks_for(o.numel() / 2, 256), 256, 0, s.stream>>>(
      in(c, 0), out(o), d[2], d[3], *c.rope, c.kind == op::rope ? 1.0 : -1.0, o.numel() / 2, positions);
}

template <class C, class I>
void transpose(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  kernels::transpose_kernel<C, I><<<kernels::blocks_for(o.numel(), 256), 256, 0, s.stream>>>(
      in(c, 0), out(o), d[1], d[2], d[0] * d[1] * d[2]);
}

// permute {d0, d1, d2, d3, order}: x (d0, d1, d2, d3) -> out, whose dimension k is x's dimension
// compute::permuted_from(order, k).
template <class C, class I>
void permute(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  kernels::permute_args a{};
  const std::int64_t x_stride[4] = {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
  for (int k = 0; k < 4; ++k) {
    a.out_dims[k] = d[compute::permuted_from(d[4], k)];
    a.in_strides[k] = x_stride[compute::permuted_from(d[4], k)];
  }
  a.numel = d[0] * d[1] * d[2] * d[3];
  kernels::permute_kernel<C, I><<<kernels::blocks_for(a.numel, 256), 256, 0, s.stream>>>(in(c, 0), out(*c.out), a);
}

// dropout {d0, d1, d2, d3}, scalar p: x masked by kernel_call::dropout; a copy when it is not active.
template <class C, class I>
void dropout(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  const compute::dropout_mask& m = c.dropout;
  kernels::dropout_args a{{d[0], d[1], d[2], d[3]}, d[0] * d[1] * d[2] * d[3], 0, 0, 1.0, m};
  if (m.run.active && c.scalar != 0.0) {
    a.stream = compute::dropout_stream(m.seed, m.run.step, m.layer);
    a.threshold = compute::dropout_threshold(c.scalar);
    a.scale = 1.0 / (1.0 - c.scalar);
  }
  kernels::dropout_kernel<C, I><<<kernels::blocks_for(a.numel, 256), 256, 0, s.stream>>>(in(c, 0), out(*c.out), a);
}

template <class C>
void softmax(backend_state& s, const kernel_call& c) {
  kernels::softmax_kernel<C><<<static_cast<unsigned>(c.dims[0]), kernels::row_threads, 0, s.stream>>>(
      in(c, 0), out(*c.out), c.dims[1], c.dims[1], false, C(1));
}

template <class C>
void softmax_grad(backend_state& s, const kernel_call& c) {
  kernels::softmax_grad_kernel<C><<<static_cast<unsigned>(c.dims[0]), kernels::row_threads, 0, s.stream>>>(
      in(c, 0), in(c, 1), out(*c.out), c.dims[1], c.dims[1], false, C(1));
}

// ones {numel}: every element kernel_call::scalar (the loss scale), or 1 where it is 0.
template <class C, class I>
void ones(backend_state& s, const kernel_call& c) {
  kernels::fill_kernel<C, I><<<kernels::blocks_for(c.dims[0], 256), 256, 0, s.stream>>>(
      out(*c.out), c.dims[0], c.scalar != 0 ? C(c.scalar) : C(1));
}

}  // namespace shardgraph::cuda::detail
