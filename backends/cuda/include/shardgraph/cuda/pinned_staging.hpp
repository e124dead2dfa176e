#pragma once
// Host-to-device copies through two pinned (page-locked) buffers. A copy from pageable memory is
// split into chunks: the CPU copies chunk k into one buffer while the DMA engine drains chunk k - 1
// from the other, so the transfer runs at PCIe speed rather than through the driver's own small
// bounce buffers, and copy() returns once the last chunk is staged: the caller may reuse its memory
// at once, and the device copy overlaps whatever the host does next (reading the next weight).
// The buffers are allocated on the first copy. Where page-locked memory cannot be had (a locked
// memory limit), copies fall back to synchronous pageable ones, with one warning.
#include <cstddef>
#include <cstdio>
#include <cstring>

#include <cuda_runtime.h>

#include <shardgraph/cuda/check.hpp>

namespace shardgraph::cuda {

class pinned_staging {
 public:
  static constexpr std::size_t chunk_bytes = std::size_t{16} << 20;

  pinned_staging() = default;
  pinned_staging(const pinned_staging&) = delete;
  pinned_staging& operator=(const pinned_staging&) = delete;
  ~pinned_staging() {
    for (int k = 0; k < 2; ++k) {
      if (drained_[k] != nullptr) {
        static_cast<void>(cudaEventSynchronize(drained_[k]));
        static_cast<void>(cudaEventDestroy(drained_[k]));
      }
      if (buffers_[k] != nullptr) static_cast<void>(cudaFreeHost(buffers_[k]));
    }
  }

  // Copies `bytes` from host memory to `device` on `stream`, in stream order.
  void copy(void* device, const void* host, std::size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return;
    if (!ready()) {
      check_cuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream),
                 "backend::upload (cudaMemcpyAsync, pageable)");
      check_cuda(cudaStreamSynchronize(stream), "backend::upload (cudaStreamSynchronize)");
      return;
    }
    for (std::size_t at = 0; at < bytes; at += chunk_bytes) {
      const std::size_t n = bytes - at < chunk_bytes ? bytes - at : chunk_bytes;
      const int k = next_;
      next_ ^= 1;
      check_cuda(cudaEventSynchronize(drained_[k]), "backend::upload (staging buffer's last copy)");
      std::memcpy(buffers_[k], static_cast<const char*>(host) + at, n);
      check_cuda(
          cudaMemcpyAsync(static_cast<char*>(device) + at, buffers_[k], n, cudaMemcpyHostToDevice, stream),
          "backend::upload (cudaMemcpyAsync from pinned staging)");
      check_cuda(cudaEventRecord(drained_[k], stream), "backend::upload (cudaEventRecord)");
    }
  }

 private:
  void* buffers_[2]{};
  cudaEvent_t drained_[2]{};
  int next_ = 0;
  bool tried_ = false, pinned_ = false;

  bool ready() {
    if (tried_) return pinned_;
    tried_ = true;
    for (int k = 0; k < 2; ++k) {
      if (cudaHostAlloc(&buffers_[k], chunk_bytes, cudaHostAllocDefault) != cudaSuccess ||
          cudaEventCreateWithFlags(&drained_[k], cudaEventDisableTiming) != cudaSuccess) {
        static_cast<void>(cudaGetLastError());  // clear the failed call's error
        std::fprintf(
            stderr,
            "shardgraph: cuda: upload: cannot allocate %zu MB of page-locked staging memory; copying "
            "from pageable memory (slower). raise the locked-memory limit (ulimit -l) to stage\n",
            2 * chunk_bytes >> 20);
        return false;
      }
    }
    pinned_ = true;
    return true;
  }
};

}  // namespace shardgraph::cuda
