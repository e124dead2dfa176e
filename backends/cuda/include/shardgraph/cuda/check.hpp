#pragma once
// check_cuda(status, what): a failed CUDA runtime call becomes shardgraph::error
//   "shardgraph: cuda: <what>: <cudaGetErrorString> (<error name>). <how to fix>"
// e.g. check_cuda(cudaMemcpy(...), "device_buffer::upload (cudaMemcpy)").
//
// Errors that leave the context usable (a bad argument, out of memory) are cleared from the
// runtime's last-error slot before throwing, so that a later check does not report them again;
// errors that break the context (an illegal address in a kernel) stay, as CUDA keeps them anyway.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/text.hpp>

#include <cuda_runtime_api.h>

#include <string_view>

namespace shardgraph::cuda {

// What the user can do about `status`; the last sentence of the message.
inline std::string_view how_to_fix(cudaError_t status) {
  switch (status) {
    case cudaErrorMemoryAllocation:
      return "Free device memory, use smaller sizes or fewer ranks per GPU, or use a GPU with more memory";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
      return "Check that a GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES) and that its driver supports "
             "this CUDA runtime";
    case cudaErrorInvalidDevice:
      return "Pass a device in [0, shardgraph::cuda::device_count())";
    case cudaErrorInvalidValue:
      return "Check the arguments: a null pointer, a size past the end of a buffer, or host memory where "
             "device memory is expected";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
      return "A kernel failed and the CUDA context is unusable: restart the process and run it under "
             "compute-sanitizer to find the kernel";
    default:
      return "Check the call's arguments; run under compute-sanitizer if a kernel is involved";
  }
}

inline void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  static_cast<void>(cudaGetLastError());
  fail(detail::text("cuda: ", what),
       detail::text(cudaGetErrorString(status), " (", cudaGetErrorName(status), ")"), how_to_fix(status));
}

}  // namespace shardgraph::cuda
