#pragma once
// What an NCCL result means to the user: describe(result, comm) is the "why" of an error message
// ("ncclAllReduce failed: invalid argument (ncclInvalidArgument): <NCCL's last error>"), and
// how_to_fix(result) its "how".
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/text.hpp>

#include <nccl.h>

#include <string>
#include <string_view>

namespace shardgraph::nccl::detail {

inline std::string_view result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "an unknown ncclResult_t";
  }
}

// `comm` may be null (before a communicator exists); NCCL's last error then is the process's.
inline std::string describe(std::string_view call, ncclResult_t result, ncclComm_t comm) {
  auto why =
      cuda::detail::text(call, " failed: ", ncclGetErrorString(result), " (", result_name(result), ")");
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') why += cuda::detail::text(": ", last);
  return why;
}

inline std::string_view how_to_fix(ncclResult_t result) {
  switch (result) {
    case ncclInvalidArgument:
      return "Pass device memory of this communicator's GPU, and sizes that agree on every rank";
    case ncclInvalidUsage:
      return "Call the same NCCL operations in the same order on every rank, one thread per communicator";
    case ncclUnhandledCudaError:
      return "A CUDA call inside NCCL failed: check that the buffers are device memory and that the GPU "
             "works (nvidia-smi); run with NCCL_DEBUG=WARN for details";
    case ncclSystemError:
      return "A system call inside NCCL failed (shared memory, sockets, file limits): run with "
             "NCCL_DEBUG=WARN for details, and check /dev/shm's size in containers";
    case ncclRemoteError:
      return "Another rank failed or left: look for its error first";
    default:
      return "Run with NCCL_DEBUG=WARN for details";
  }
}

// Throws shardgraph::error unless `result` is ncclSuccess or ncclInProgress (a non-blocking
// communicator's "accepted, still working").
inline void check_nccl(ncclResult_t result, std::string_view where, std::string_view call,
                       ncclComm_t comm = nullptr) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  fail(where, describe(call, result, comm), how_to_fix(result));
}

}  // namespace shardgraph::nccl::detail
