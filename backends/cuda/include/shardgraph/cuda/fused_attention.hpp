#pragma once
// cuda::backend's fused attention: cuDNN's (cudnn_attention.hpp, built with SHARDGRAPH_CUDA_CUDNN
// and chosen; causal or not, no mask) where it takes the call, else shardgraph's flash attention
// kernels (kernels/flash_attention.cuh; causal, no mask) for 16-bit inputs with head_dim 64. Forward and backward
// decide alike, so a saved log-sum-exp (cuDNN's natural log, the own kernels' log2) is read by the
// kernel that wrote it. A forward saving statistics (fused::attention_saved) writes its log-sum-exp
// into kernel_call::saved, which the plan allocates with its result; a backward given both
// (kernel_call::saved, side) reads them where its forward ran fused, else runs the forward again.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/attention_shape.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/check.hpp>
#if SHARDGRAPH_CUDA_CUDNN
#include <shardgraph/cuda/cudnn_attention.hpp>
#endif
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/flash_attention.cuh>
#include <shardgraph/cuda/scratch.hpp>

#include <algorithm>
#include <cstddef>

namespace shardgraph::cuda::detail {

// Flash attention computes causal attention without a mask, cuDNN's graphs causal or not without a
// mask; the unfused path (attention_calls.hpp) takes every other kernel_call::masking.
inline bool flash_masking(const kernel_call& c) { return c.masking == attention_masking{}; }
inline bool cudnn_masking(const kernel_call& c) { return c.masking.mask == attention_mask::none; }

// Flash attention takes 16-bit inputs with head_dim 64, in 16-byte aligned buffers (its vector loads).
inline bool flash_applies(const kernel_call& c, const attention_shape& a) {
  if (!flash_masking(c) || !kernels::flash::supports(c.in[0]->type(), a.head_dim) || a.seq > (1 << 30) ||
      a.keys != a.seq)
    return false;
  return aligned_operands(c);
}

#if SHARDGRAPH_CUDA_CUDNN
inline cuda::cudnn_attention::shape cudnn_shape_of(const kernel_call& c, const attention_shape& a) {
  return {.batch = a.batch,
          .heads = a.heads,
          .seq = a.seq,
          .head_dim = a.head_dim,
          .type = c.in[0]->type(),
          .token_major = c.token_major,
          .scale = a.scale,
          .causal = c.masking.causal};
}
#endif

// cuDNN's fused attention takes the call: chosen, built with cuDNN, a shape its graphs take
// (cudnn_attention::supports), 16-byte aligned buffers.
inline bool cudnn_applies([[maybe_unused]] const backend_state& s, [[maybe_unused]] const kernel_call& c,
                          [[maybe_unused]] const attention_shape& a) {
#if SHARDGRAPH_CUDA_CUDNN
  return s.cudnn != nullptr && cudnn_masking(c) && a.keys == a.seq && aligned_operands(c) &&
         cuda::cudnn_attention::supports(cudnn_shape_of(c, a), a.kv_heads);
#else
  return false;
#endif
}

// Whether the forward of a gradient call's operands wrote the statistics the call is given: the
// attention call of q, k, v = in[0..2] writing its result into `side` ran fused (cuDNN or flash).
inline bool saved_by_forward(const backend_state& s, const kernel_call& c) {
  if (c.saved == nullptr || c.side == nullptr) return false;
  kernel_call forward = c;
  forward.kind = op::attention;
  forward.out = c.side;
  forward.in[3] = c.in[4];  // the mask, if any, after q, k, v
  forward.in[4] = nullptr;
  forward.side = nullptr;
  forward.key_grad = forward.value_grad = nullptr;
  const attention_shape a = attention_of(forward);
  return cudnn_applies(s, forward, a) || flash_applies(forward, a);
}

// The statistics a forward writes: kernel_call::saved, else scratch.
inline float* statistics_of_forward(backend_state& s, const kernel_call& c, const attention_shape& a) {
  if (c.saved != nullptr) return static_cast<float*>(c.saved->data());
  return s.scratch.get<float>(scratch_use::attention_statistics, static_cast<std::size_t>(a.batch * a.heads * a.seq));
}

#if SHARDGRAPH_CUDA_CUDNN
// cuDNN's workspace for the forward and the backward of `shape`: one region, so that the backward
// does not grow it after a step was recorded.
inline void* cudnn_workspace(backend_state& s, const cuda::cudnn_attention::shape& shape) {
  const std::size_t bytes =
      std::max({s.cudnn->forward_workspace(shape), s.cudnn->backward_workspace(shape), std::size_t{256}});
  return s.scratch.get(scratch_use::attention_workspace, bytes);
}
inline void cudnn_forward(backend_state& s, const kernel_call& c, const attention_shape& a) {
  const auto shape = cudnn_shape_of(c, a);
  float* lse = statistics_of_forward(s, c, a);
  void* workspace = cudnn_workspace(s, shape);
  s.cudnn->forward(shape, c.in[0]->data(), c.in[1]->data(), c.in[2]->data(), c.out->data(), lse, workspace,
                   s.stream);
}
inline void cudnn_backward(backend_state& s, const kernel_call& c, const attention_shape& a, void* dq,
                           void* dk, void* dv) {
  const auto shape = cudnn_shape_of(c, a);
  const void *q = c.in[0]->data(), *k = c.in[1]->data(), *v = c.in[2]->data();
  float* lse = saved_by_forward(s, c) ? static_cast<float*>(c.saved->data()) : nullptr;
  const void* out = lse != nullptr ? c.side->data() : nullptr;
  void* workspace = cudnn_workspace(s, shape);
  if (lse == nullptr) {
    lse = s.scratch.get<float>(scratch_use::attention_statistics,
                               static_cast<std::size_t>(a.batch * a.heads * a.seq));
    void* recomputed = s.scratch.get(scratch_use::attention_output, c.in[0]->size_bytes());
    s.cudnn->forward(shape, q, k, v, recomputed, lse, workspace, s.stream);
    out = recomputed;
  }
  s.cudnn->backward(shape, q, k, v, out, c.in[3]->data(), lse, dq, dk, dv, workspace, s.stream);
}
#else  // never called: cudnn_applies is false
[[noreturn]] inline void built_without_cudnn() {
  fail("cuda::backend: attention", "cuDNN's attention was asked for in a build without cuDNN",
       "this is a bug in shardgraph; please report it");
}
[[noreturn]] inline void cudnn_forward(backend_state&, const kernel_call&, const attention_shape&) {
  built_without_cudnn();
}
[[noreturn]] inline void cudnn_backward(backend_state&, const kernel_call&, const attention_shape&, void*,
                                        void*, void*) {
  built_without_cudnn();
}
#endif

template <class T>
void flash_forward(backend_state& s, const kernel_call& c, const attention_shape& a) {
  float* lse = c.saved != nullptr ? static_cast<float*>(c.saved->data()) : nullptr;
  kernels::flash::forward<T>(typed<T>(*c.in[0]), typed<T>(*c.in[1]), typed<T>(*c.in[2]),
                             static_cast<T*>(c.out->data()), lse, flash_shape_of(c, a), s.stream);
  check_cuda(cudaGetLastError(), "backend: flash attention (launch)");
}
template <class T>
void flash_backward(backend_state& s, const kernel_call& c, const attention_shape& a, void* dq, void* dk,
                    void* dv) {
  const std::size_t rows = static_cast<std::size_t>(a.batch * a.heads * a.seq);
  const bool kept = saved_by_forward(s, c);
  float* lse = kept ? static_cast<float*>(c.saved->data()) : nullptr;
  T* out = kept ? static_cast<T*>(c.side->data())
                : static_cast<T*>(s.scratch.get(scratch_use::attention_output, c.in[0]->size_bytes()));
  float* statistics = s.scratch.get<float>(scratch_use::attention_statistics, 2 * rows);
  kernels::flash::backward<T>(typed<T>(*c.in[0]), typed<T>(*c.in[1]), typed<T>(*c.in[2]), typed<T>(*c.in[3]),
                              static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv), out,
                              kept ? lse : statistics, statistics + rows, flash_shape_of(c, a), s.stream,
                              kept);
  check_cuda(cudaGetLastError(), "backend: flash attention gradient (launch)");
}

}  // namespace shardgraph::cuda::detail
