#pragma once
// The cpu backward kernels: the gradients of the forward kernels (kernels.hpp), for reverse-mode
// autodiff. The same conventions as the forward: plain functions over row-major buffers, templated
// on the scalar type, every size LOCAL to the rank, row sums in accumulator_t<T>. An output named
// d* is written (=), except the gradients of parameters (weights, biases, tables), which accumulate
// (+=) over layers and micro-batches, as each kernel's comment says.
//
// Ops whose gradient needs no kernel of its own:
//   linear, matmul        gemm and gemm_at_b, mapped in backward/gemm_backward.hpp
//   add                   dx = dy for both operands
//   mul                   da = dy * b, db = dy * a
//   gelu, silu            dx = dy * gelu_tanh_grad(x), dy * silu_grad(x)
//   relu, gelu_erf        dx = dy * relu_grad(x), dy * gelu_erf_grad(x)
//   quick_gelu            dx = dy * quick_gelu_grad(x)
//   split_heads           dx = merge_heads(dy), and merge_heads' is split_heads(dy): each is the
//                         other's inverse permutation, hence its transpose
//   rope                  rope_backward(dx = copy of dy), in place
#include "shardgraph/cpu/backward/activations_backward.hpp"
#include "shardgraph/cpu/backward/attention_backward.hpp"
#include "shardgraph/cpu/backward/bias_backward.hpp"
#include "shardgraph/cpu/backward/cross_entropy_backward.hpp"
#include "shardgraph/cpu/backward/embedding_backward.hpp"
#include "shardgraph/cpu/backward/gemm_backward.hpp"
#include "shardgraph/cpu/backward/norms_backward.hpp"
#include "shardgraph/cpu/backward/rope_backward.hpp"
#include "shardgraph/cpu/backward/softmax_backward.hpp"
