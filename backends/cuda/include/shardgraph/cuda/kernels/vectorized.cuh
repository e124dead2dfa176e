#pragma once
// 16-byte vector versions of the elementwise kernels, for calls whose buffers all hold one dtype T,
// are 16-byte aligned and whose sizes (and operand periods) are multiples of the vector: each thread
// moves lanes<T> elements (8 in 16-bit) per load and store, so memory-bound passes run near HBM
// bandwidth. They compute exactly what the scalar kernels compute (widen to C, one rounding).
#include <shardgraph/cuda/kernels/elementwise.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace shardgraph::cuda::kernels {

template <class T>
inline constexpr int lanes = static_cast<int>(16 / sizeof(T));

template <class T, class C>
__device__ __forceinline__ C widen(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return static_cast<C>(__bfloat162float(x));
  else if constexpr (std::is_same_v<T, __half>)
    return static_cast<C>(__half2float(x));
  else
    return static_cast<C>(x);
}
template <class T, class C>
__device__ __forceinline__ T narrow(C x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(static_cast<float>(x));
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(static_cast<float>(x));
  else
    return static_cast<T>(x);
}

template <class T, class C>
__device__ __forceinline__ void load_vector(const T* p, C (&v)[lanes<T>]) {
  const uint4 bits = *reinterpret_cast<const uint4*>(p);
  T x[lanes<T>];
  memcpy(x, &bits, sizeof bits);
  for (int j = 0; j < lanes<T>; ++j) v[j] = widen<T, C>(x[j]);
}
template <class T, class C>
__device__ __forceinline__ void store_vector(T* p, const C (&v)[lanes<T>]) {
  T x[lanes<T>];
  for (int j = 0; j < lanes<T>; ++j) x[j] = narrow<T, C>(v[j]);
  uint4 bits;
  memcpy(&bits, x, sizeof bits);
  *reinterpret_cast<uint4*>(p) = bits;
}

// chain_kernel on vectors: element i = vector * lanes; a period operand repeats every `period`
// elements, a multiple of lanes, so a vector of it is contiguous too.
template <class T, class C, class I>
__global__ void chain_vector_kernel(chain_args a) {
  constexpr int n = lanes<T>;
  const I vectors = static_cast<I>(a.numel / n);
  for (I w = global_thread<I>(); w < vectors; w += grid_threads<I>()) {
    const I i = w * n;
    C v[n];
    load_vector(static_cast<const T*>(a.operands[0].data) + i, v);
    for (int s = 0; s < a.length; ++s) {
      const compute::elementwise_step& st = a.steps[s];
      C o[n] = {};
      if (st.operand >= 0)
        load_vector(static_cast<const T*>(a.operands[st.operand].data) +
                        (st.period > 0 ? i % static_cast<I>(st.period) : i),
                    o);
      for (int j = 0; j < n; ++j) v[j] = apply_step(st.kind, v[j], o[j]);
    }
    store_vector(static_cast<T*>(a.out.data) + i, v);
  }
}

template <class T, class C, op Grad, class I>
__global__ void activation_grad_vector_kernel(const T* x, const T* dy, T* out, std::int64_t numel) {
  constexpr int n = lanes<T>;
  const I vectors = static_cast<I>(numel / n);
  for (I w = global_thread<I>(); w < vectors; w += grid_threads<I>()) {
    const I i = w * n;
    C xv[n], dv[n];
    load_vector(x + i, xv);
    load_vector(dy + i, dv);
    for (int j = 0; j < n; ++j) xv[j] = activation_grad<C, Grad>(xv[j], dv[j]);
    store_vector(out + i, xv);
  }
}

// heads_kernel on 16-byte vectors of head_dim (a plain move: x and y share a dtype).
// vectors indexes the (batch, heads, seq, head_vectors) side.
template <bool Split, class I>
__global__ void heads_vector_kernel(const uint4* x, uint4* y, std::int64_t seq, std::int64_t heads,
                                    std::int64_t head_vectors, std::int64_t vectors) {
  const I D = static_cast<I>(head_vectors), S = static_cast<I>(seq), H = static_cast<I>(heads);
  for (I e = global_thread<I>(); e < static_cast<I>(vectors); e += grid_threads<I>()) {
    const I d = e % D, t = (e / D) % S, h = (e / (D * S)) % H, b = e / (D * S * H);
    const I other = ((b * S + t) * H + h) * D + d;
    if constexpr (Split)
      y[e] = x[other];
    else
      y[other] = x[e];
  }
}

}  // namespace shardgraph::cuda::kernels
