#pragma once
// Attention of cuda::backend's calls and its gradients: the fused kernels where they take the call
// (fused_attention.hpp: no mask; flash causal only), else batched GEMMs around a softmax, causal or not,
// masked where the call carries a mask (kernel_call::masking; attention_shape.hpp's products), with
// the scores, probabilities and their gradients in scratch.
//
//   attention          {batch, heads, kv_heads, seq, head_dim, keys}  q, k, v -> out
//   attention_grad_*   {batch, heads, kv_heads, seq, head_dim, keys}  q, k, v, dout -> dq, dk or dv
// keys != seq (a cross-attention) runs as the batched GEMMs.
// The gradient calls' dq, dk and dv are made together: in place when an attention_grad_q call carries
// key_grad and value_grad (fused::attention_backward), else the two not asked for in scratch.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/attention_shape.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/fused_attention.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/masked_softmax.cuh>
#include <shardgraph/cuda/kernels/norms.cuh>
#include <shardgraph/cuda/kernels/softmax.cuh>
#include <shardgraph/cuda/products.hpp>
#include <shardgraph/cuda/scratch.hpp>
#include <shardgraph/cuda/tensor_buffer.hpp>
#include <shardgraph/ir/op.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace shardgraph::cuda::detail {

// The mask a call carries (kernel_call::masking), as masked_softmax_kernel reads it.
inline kernels::key_mask key_mask_of(const kernel_call& c, const attention_shape& a) {
  const tensor_buffer* mask = c.in[attention_mask_input(c.kind != op::attention)];
  if (mask == nullptr || mask->type() != dtype::i64)
    fail("cuda::backend: " + std::string(op_name(c.kind)), "the call's mask input is missing or not i64",
         "pass the mask (batch, seq) i64 after q, k, v (and dout), as kernel_call::masking states");
  return {.values = static_cast<const std::int64_t*>(mask->data()),
          .kind = c.masking.mask,
          .rows_per_batch = a.heads * a.seq};
}

// S = Q K^T (scores, f32/f64), then P = softmax(S * scale) over the keys each query sees (causal,
// masked: kernel_call::masking) in the inputs' dtype.
template <class C>
void attention_probabilities(backend_state& s, const kernel_call& c, const attention_shape& a, void* scores,
                             void* p) {
  const tensor_buffer &q = *c.in[0], &k = *c.in[1];
  const dtype t = q.type(), st = score_type(t);
  product(s, q.data(), t, k.data(), k.type(), scores, st, scores_product(a), "attention scores");
  const C scale = C(a.scale);
  const auto blocks = static_cast<unsigned>(a.products * a.rows);
  if (c.masking.mask == attention_mask::none)
    kernels::softmax_kernel<C><<<blocks, kernels::row_threads, 0, s.stream>>>(
        kernels::ref{scores, st}, kernels::mut_ref{p, t}, a.keys, a.seq, c.masking.causal, scale);
  else
    kernels::masked_softmax_kernel<C><<<blocks, kernels::row_threads, 0, s.stream>>>(
        kernels::ref{scores, st}, kernels::mut_ref{p, t}, a.seq, a.keys, c.masking.causal, scale,
        key_mask_of(c, a));
}

template <class C>
void attention_forward(backend_state& s, const kernel_call& c) {
  const attention_shape a = attention_of(c);
  const tensor_buffer &q = *c.in[0], &k = *c.in[1], &v = *c.in[2];
  if (k.type() != q.type() || v.type() != q.type() || c.out->type() != q.type())
    fail("cuda::backend: attention", "q, k, v and the output must share a dtype",
         "this is a bug in the executor; please report it");
  if (cudnn_applies(s, c, a)) return cudnn_forward(s, c, a);
  if (flash_applies(c, a))
    return q.type() == dtype::bf16 ? flash_forward<__nv_bfloat16>(s, c, a) : flash_forward<__half>(s, c, a);
  const std::size_t score_elements = static_cast<std::size_t>(a.products * a.rows * a.keys);
  void* scores = s.scratch.get(scratch_use::scores, score_elements * dtype_size(score_type(q.type())));
  void* p = s.scratch.get(scratch_use::probabilities, score_elements * dtype_size(q.type()));
  attention_probabilities<C>(s, c, a, scores, p);
  product(s, p, q.type(), v.data(), v.type(), c.out->data(), c.out->type(), times_values_product(a),
          "attention output");
}

// dq, dk and dv as batched GEMMs around the softmax's gradient (the scores in scratch).
template <class C>
void batched_attention_backward(backend_state& s, const kernel_call& c, const attention_shape& a, void* dq,
                                void* dk, void* dv) {
  const tensor_buffer &q = *c.in[0], &k = *c.in[1], &v = *c.in[2], &dout = *c.in[3];
  const dtype t = q.type(), st = score_type(t);
  const std::size_t score_elements = static_cast<std::size_t>(a.products * a.rows * a.keys);
  void* scores = s.scratch.get(scratch_use::scores, score_elements * dtype_size(st));
  void* p = s.scratch.get(scratch_use::probabilities, score_elements * dtype_size(t));
  void* ds = s.scratch.get(scratch_use::score_gradients, score_elements * dtype_size(t));
  attention_probabilities<C>(s, c, a, scores, p);
  // dP = dO V^T into the scores' memory; dS = P (dP - rowsum(dP P)) * scale
  product(s, dout.data(), t, v.data(), t, scores, st, scores_product(a), "attention dP");
  const C scale = C(a.scale);
  kernels::softmax_grad_kernel<C>
      <<<static_cast<unsigned>(a.products * a.rows), kernels::row_threads, 0, s.stream>>>(
          kernels::ref{p, t}, kernels::ref{scores, st}, kernels::mut_ref{ds, t}, a.keys, a.seq, c.masking.causal,
          scale);
  // dQ = dS K; dK = dS^T Q; dV = P^T dO (the transposes sum over the group's query heads)
  product(s, ds, t, k.data(), t, dq, t, times_values_product(a), "attention dQ");
  product(s, ds, t, q.data(), t, dk, t, transposed_product(a), "attention dK");
  product(s, p, t, dout.data(), t, dv, t, transposed_product(a), "attention dV");
}

// dq, dk and dv of an attention gradient call's operands into the given memory: fused attention
// where it applies, else the batched products.
template <class C>
void attention_gradients(backend_state& s, const kernel_call& c, const attention_shape& a, void* dq, void* dk,
                         void* dv) {
  if (cudnn_applies(s, c, a)) return cudnn_backward(s, c, a, dq, dk, dv);
  if (!flash_applies(c, a)) return batched_attention_backward<C>(s, c, a, dq, dk, dv);
  if (c.in[0]->type() == dtype::bf16) return flash_backward<__nv_bfloat16>(s, c, a, dq, dk, dv);
  flash_backward<__half>(s, c, a, dq, dk, dv);
}

inline void require_attention_gradient_dtypes(const kernel_call& c) {
  const dtype t = c.in[0]->type();
  for (const tensor_buffer* b : {c.in[1], c.in[2], c.in[3], static_cast<const tensor_buffer*>(c.out)})
    if (b->type() != t)
      fail("cuda::backend: attention gradient",
           "q, k, v, the output gradient and the result must share a dtype",
           "this is a bug in the executor; please report it");
}

// dq, dk and dv are made together: an attention_grad_q call carrying key_grad and value_grad
// (fused::attention_backward) gets all three written in place; a call of one gradient alone writes
// its own into its output and the other two into scratch.
template <class C>
void attention_backward(backend_state& s, const kernel_call& c) {
  const attention_shape a = attention_of(c);
  const tensor_buffer &q = *c.in[0], &k = *c.in[1];
  require_attention_gradient_dtypes(c);
  if (c.key_grad != nullptr) {
    if (c.key_grad->type() != q.type() || c.value_grad->type() != q.type())
      fail("cuda::backend: attention gradient", "dk and dv must share q's dtype",
           "this is a bug in the executor; please report it");
    return attention_gradients<C>(s, c, a, c.out->data(), c.key_grad->data(), c.value_grad->data());
  }
  void* dq = c.kind == op::attention_grad_q ? c.out->data() : s.scratch.get(scratch_use::attention_dq, q.size_bytes());
  void* dk = c.kind == op::attention_grad_k ? c.out->data() : s.scratch.get(scratch_use::attention_dk, k.size_bytes());
  void* dv = c.kind == op::attention_grad_v ? c.out->data() : s.scratch.get(scratch_use::attention_dv, k.size_bytes());
  attention_gradients<C>(s, c, a, dq, dk, dv);
}

}  // namespace shardgraph::cuda::detail
