#pragma once
// device_count(), has_device(): how many CUDA devices this process can use.
//
// No driver, a driver too old for this runtime, no GPU and an empty CUDA_VISIBLE_DEVICES all mean
// 0 devices: these functions never throw, so that code (and tests) can ask first and then choose
// to run elsewhere or skip.
#include <cuda_runtime_api.h>

namespace shardgraph::cuda {

inline int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  return count;
}

inline bool has_device() noexcept { return device_count() > 0; }

}  // namespace shardgraph::cuda
