#pragma once
// The cuBLASLt pieces gemm_runner (gemm.hpp) is made of: status names and checks, the mapping of
// element types and epilogues to cuBLASLt's, pointer alignment, owned descriptors, and the events
// and L2 cache flush that time its candidate algorithms.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/gemm_problem.hpp>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace shardgraph::cuda::detail {

inline std::string gemm_text(const gemm_shape& s) {
  const char* t = s.type == element::f32    ? "f32"
                  : s.type == element::bf16 ? "bf16"
                  : s.type == element::f16  ? "f16"
                                            : "f64";
  return "gemm (" + std::to_string(s.m) + " x " + std::to_string(s.k) + ") . (" + std::to_string(s.k) +
         " x " + std::to_string(s.n) + ") " + t;
}

// cuBLASLt's status names (cublasGetStatusName lives in libcublas, which the backend does not link).
inline const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED (no handle)";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED (out of memory)";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE (a bad argument)";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH (not on this GPU)";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED (the kernel failed)";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED (this combination)";
    default:
      return "an unknown cuBLAS status";
  }
}

inline void check_cublas(cublasStatus_t status, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail("cuda: " + what, std::string("cuBLASLt returned ") + cublas_status_name(status),
       "check the sizes and that the pointers are device memory of this GPU");
}

// The largest power of two up to 256 dividing the address (cuBLASLt's alignment preference).
inline std::uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

inline cudaDataType_t data_type(element e) {
  switch (e) {
    case element::f32:
      return CUDA_R_32F;
    case element::bf16:
      return CUDA_R_16BF;
    case element::f16:
      return CUDA_R_16F;
    case element::f64:
      return CUDA_R_64F;
  }
  return CUDA_R_32F;
}

inline cublasLtEpilogue_t lt_epilogue(epilogue e) {
  switch (e) {
    case epilogue::none:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case epilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case epilogue::gelu:
      return CUBLASLT_EPILOGUE_GELU;
    case epilogue::bias_gelu:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case epilogue::bias_grad_of_b:  // cuBLASLt's first operand is our B (see gemm_runner::run)
      return CUBLASLT_EPILOGUE_BGRADA;
    case epilogue::bias_grad_of_a:
      return CUBLASLT_EPILOGUE_BGRADB;
    case epilogue::gelu_aux:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case epilogue::bias_gelu_aux:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case epilogue::gelu_grad:
      return CUBLASLT_EPILOGUE_DGELU;
    case epilogue::gelu_grad_bias_grad:
      return CUBLASLT_EPILOGUE_DGELU_BGRAD;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

inline bool uses_bias_pointer(epilogue e) {
  return e == epilogue::bias || e == epilogue::bias_gelu || e == epilogue::bias_grad_of_b ||
         e == epilogue::bias_grad_of_a || e == epilogue::bias_gelu_aux || e == epilogue::gelu_grad_bias_grad;
}
inline bool uses_aux_pointer(epilogue e) {
  return e == epilogue::gelu_aux || e == epilogue::bias_gelu_aux || e == epilogue::gelu_grad ||
         e == epilogue::gelu_grad_bias_grad;
}

// Owns one cuBLASLt descriptor of type T, destroyed by Destroy.
template <class T, cublasStatus_t (*Destroy)(T)>
struct lt_handle {
  T value = nullptr;
  lt_handle() = default;
  lt_handle(const lt_handle&) = delete;
  lt_handle& operator=(const lt_handle&) = delete;
  ~lt_handle() {
    if (value != nullptr) Destroy(value);
  }
};

// Two CUDA events, made for one timing and destroyed with it.
struct event_pair {
  cudaEvent_t start = nullptr, stop = nullptr;
  event_pair() {
    check_cuda(cudaEventCreate(&start), "gemm_runner timing (cudaEventCreate)");
    check_cuda(cudaEventCreate(&stop), "gemm_runner timing (cudaEventCreate)");
  }
  event_pair(const event_pair&) = delete;
  event_pair& operator=(const event_pair&) = delete;
  ~event_pair() {
    static_cast<void>(cudaEventDestroy(start));
    static_cast<void>(cudaEventDestroy(stop));
  }
};

// Memory twice the size of the L2 cache, overwritten before a timed run so that the run reads its
// operands from memory. Where the memory cannot be had, nothing is overwritten (and timings read
// what the cache holds).
class cache_flush {
 public:
  cache_flush() {
    int device = 0, l2 = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess || l2 <= 0)
      return;
    bytes_ = 2 * static_cast<std::size_t>(l2);
    if (cudaMalloc(&data_, bytes_) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());  // out of memory is not sticky: clear it
      data_ = nullptr;
    }
  }
  cache_flush(const cache_flush&) = delete;
  cache_flush& operator=(const cache_flush&) = delete;
  ~cache_flush() {
    if (data_ != nullptr) static_cast<void>(cudaFree(data_));
  }
  void overwrite(cudaStream_t stream) {
    if (data_ != nullptr)
      check_cuda(cudaMemsetAsync(data_, 0, bytes_, stream), "gemm_runner timing (cache flush)");
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace shardgraph::cuda::detail
