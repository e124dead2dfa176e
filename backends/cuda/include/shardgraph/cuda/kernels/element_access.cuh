#pragma once
// Device-side access to a buffer of any of the program's element types: kernels compute in C (float,
// or double when a call touches f64) and load and store through a typed reference, so one kernel
// serves f64, f32, bf16 and f16 buffers and mixed calls (bf16 logits, an f32 loss). The dtype
// branch is uniform across a kernel launch, so it costs no divergence.
#include <shardgraph/core/dtype.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#ifndef __CUDACC__
#error \
    "shardgraph/cuda/kernels: this header holds CUDA kernels; compile the file that includes it with nvcc (a .cu file)"
#endif

namespace shardgraph::cuda::kernels {

struct ref {
  const void* data = nullptr;
  dtype type = dtype::f32;
};

struct mut_ref {
  void* data = nullptr;
  dtype type = dtype::f32;
  __host__ __device__ operator ref() const { return {data, type}; }
};

template <class C>
__device__ __forceinline__ C load(ref r, std::int64_t i) {
  switch (r.type) {
    case dtype::f64:
      return static_cast<C>(static_cast<const double*>(r.data)[i]);
    case dtype::f32:
      return static_cast<C>(static_cast<const float*>(r.data)[i]);
    case dtype::bf16:
      return static_cast<C>(__bfloat162float(static_cast<const __nv_bfloat16*>(r.data)[i]));
    case dtype::f16:
      return static_cast<C>(__half2float(static_cast<const __half*>(r.data)[i]));
    case dtype::i64:
      return static_cast<C>(static_cast<const std::int64_t*>(r.data)[i]);
    case dtype::i32:
      return static_cast<C>(static_cast<const std::int32_t*>(r.data)[i]);
  }
  return C(0);
}

// Rounds once, to nearest even, as the cpu backend's narrowing does.
template <class C>
__device__ __forceinline__ void store(mut_ref r, std::int64_t i, C v) {
  switch (r.type) {
    case dtype::f64:
      static_cast<double*>(r.data)[i] = static_cast<double>(v);
      return;
    case dtype::f32:
      static_cast<float*>(r.data)[i] = static_cast<float>(v);
      return;
    case dtype::bf16:
      static_cast<__nv_bfloat16*>(r.data)[i] = __float2bfloat16_rn(static_cast<float>(v));
      return;
    case dtype::f16:
      static_cast<__half*>(r.data)[i] = __float2half_rn(static_cast<float>(v));
      return;
    case dtype::i64:
      static_cast<std::int64_t*>(r.data)[i] = static_cast<std::int64_t>(v);
      return;
    case dtype::i32:
      static_cast<std::int32_t*>(r.data)[i] = static_cast<std::int32_t>(v);
      return;
  }
}

__device__ __forceinline__ std::int64_t load_id(ref r, std::int64_t i) {
  if (r.type == dtype::i32) return static_cast<const std::int32_t*>(r.data)[i];
  return static_cast<const std::int64_t*>(r.data)[i];
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
template <class C>
__device__ C block_sum(C v) {
  __shared__ C partial[32];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x / 32);
  C total = 0;
  for (int w = 0; w < warps; ++w) total += partial[w];
  return total;
}

template <class C>
__device__ C block_max(C v) {
  __shared__ C partial[32];
  for (int offset = 16; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x / 32);
  C best = partial[0];
  for (int w = 1; w < warps; ++w) best = max(best, partial[w]);
  return best;
}

// Grid-stride loop bounds for elementwise kernels. Kernels index with I: 32-bit unsigned where the
// sizes allow (the backend's choice), since 64-bit division and remainder are slow on the GPU.
template <class I = std::int64_t>
__device__ __forceinline__ I global_thread() {
  return static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;
}
template <class I = std::int64_t>
__device__ __forceinline__ I grid_threads() {
  return static_cast<I>(gridDim.x) * blockDim.x;
}

inline unsigned blocks_for(std::int64_t n, unsigned threads = 256) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

}  // namespace shardgraph::cuda::kernels
