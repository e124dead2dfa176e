#pragma once
// What every launch of cuda::backend needs: a call's buffers as the kernels' operands (kernels::ref,
// typed pointers), whether the vector kernels (kernels/vectorized.cuh) take them, the compute and
// index types of a call, and how many blocks of a kernel the GPU runs at once.
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/core/dtype.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/kernels/element_access.cuh>
#include <shardgraph/cuda/kernels/elementwise.cuh>
#include <shardgraph/cuda/tensor_buffer.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <tuple>
#include <type_traits>

namespace shardgraph::cuda::detail {

using kernel_call = compute::kernel_call<tensor_buffer>;

inline kernels::ref in(const tensor_buffer& b) { return {b.data(), b.type()}; }
inline kernels::mut_ref out(tensor_buffer& b) { return {b.data(), b.type()}; }
inline kernels::ref in(const kernel_call& c, int k) { return in(*c.in[k]); }
template <class T>
const T* typed(const tensor_buffer& b) {
  return static_cast<const T*>(b.data());
}

// The vector kernels (kernels/vectorized.cuh) take calls whose buffers all hold one floating dtype t,
// start on 16 bytes and hold whole vectors (numel a multiple of 16 / dtype_size(t)).
inline std::int64_t vector_lanes(dtype t) { return static_cast<std::int64_t>(16 / dtype_size(t)); }
inline bool vector_ready(dtype t, std::int64_t numel, std::initializer_list<kernels::ref> buffers) {
  if (t != dtype::f64 && t != dtype::f32 && t != dtype::bf16 && t != dtype::f16) return false;
  if (numel % vector_lanes(t) != 0) return false;
  for (const kernels::ref& b : buffers)
    if (b.type != t || reinterpret_cast<std::uintptr_t>(b.data) % 16 != 0) return false;
  return true;
}
inline bool vector_ready(const kernels::chain_args& a) {
  const dtype t = a.out.type;
  if (!vector_ready(t, a.numel, {a.out, a.operands[0]})) return false;
  for (int s = 0; s < a.length; ++s) {
    const compute::elementwise_step& st = a.steps[s];
    if (st.operand >= 0 &&
        (st.period % vector_lanes(t) != 0 || !vector_ready(t, 0, {a.operands[st.operand]})))
      return false;
  }
  return true;
}
// Runs kernel<T, C>(grid) for the storage type T of t and its compute type C.
template <class Launch>
void with_vector_types(dtype t, Launch&& launch) {
  switch (t) {
    case dtype::bf16:
      return launch.template operator()<__nv_bfloat16, float>();
    case dtype::f16:
      return launch.template operator()<__half, float>();
    case dtype::f32:
      return launch.template operator()<float, float>();
    default:
      return launch.template operator()<double, double>();
  }
}
// Whether the vector kernels of dtype t compute in C (double for f64, float otherwise).
template <class C>
bool compute_type_is(dtype t) {
  return std::is_same_v<C, double> == (t == dtype::f64);
}

// Whether a buffer of the call has 2^31 elements or more (64-bit indices), or is f64 (f64 compute).
inline bool large(const kernel_call& c) {
  constexpr std::int64_t limit = std::int64_t{1} << 31;
  if (c.out->numel() >= limit) return true;
  for (const tensor_buffer* b : c.in)
    if (b != nullptr && b->numel() >= limit) return true;
  for (int k = 0; k < c.operand_count; ++k)
    if (c.operands[k]->numel() >= limit) return true;
  return false;
}
inline bool uses_f64(const kernel_call& c) {
  if (c.out->type() == dtype::f64) return true;
  for (const tensor_buffer* b : c.in)
    if (b != nullptr && b->type() == dtype::f64) return true;
  for (int k = 0; k < c.operand_count; ++k)
    if (c.operands[k]->type() == dtype::f64) return true;
  return false;
}

// Blocks of `threads` with `shared` bytes of dynamic shared memory that the GPU runs at once
// (occupancy times SMs): a grid of that many strides over all rows in one wave. Asked of CUDA
// once per kernel and size; more than 48 KiB of shared memory is allowed to the kernel here.
template <class Kernel>
std::int64_t resident_blocks(backend_state& s, Kernel kernel, std::size_t shared, unsigned threads = 256) {
  const auto key = std::tuple{reinterpret_cast<const void*>(kernel), shared, threads};
  auto found = s.blocks_per_sm.find(key);
  if (found == s.blocks_per_sm.end()) {
    if (shared > 48 * 1024)
      check_cuda(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)),
          "backend (cudaFuncSetAttribute)");
    int per_sm = 0;
    check_cuda(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, static_cast<int>(threads), shared),
        "backend (cudaOccupancyMaxActiveBlocksPerMultiprocessor)");
    found = s.blocks_per_sm.emplace(key, std::max(per_sm, 1)).first;
  }
  return std::int64_t{found->second} * s.multiprocessors;
}

}  // namespace shardgraph::cuda::detail
