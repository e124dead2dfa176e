#pragma once
// device_guard: makes `device` the current CUDA device for a scope and restores the previous one,
// so that a call on one GPU's behalf leaves the calling thread's choice of device as it was.
#include <shardgraph/cuda/check.hpp>

#include <cuda_runtime_api.h>

namespace shardgraph::cuda {

class device_guard {
 public:
  explicit device_guard(int device) {
    check_cuda(cudaGetDevice(&previous_), "device_guard (cudaGetDevice)");
    if (previous_ == device) return;
    check_cuda(cudaSetDevice(device), "device_guard (cudaSetDevice)");
    switched_ = true;
  }
  ~device_guard() {
    if (switched_) static_cast<void>(cudaSetDevice(previous_));
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace shardgraph::cuda
