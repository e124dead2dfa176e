#pragma once
// stream_recording: the work queued on a stream between begin() and end(), kept as an
// instantiated CUDA graph and launched again with replay(): hundreds of kernels for the host cost
// of one launch, and no gaps between them for the launches the host has not yet made.
//
//   stream_recording::begin(stream);        // nothing queued from here runs; it is recorded
//   ... kernels, cuBLASLt products, async copies and memsets on `stream` ...
//   auto r = stream_recording::end(stream);  // std::nullopt when the work could not be recorded
//   r->replay(stream);                       // runs it (the first time too)
//
// What may not be recorded (a synchronization, an allocation, a host read) makes end() return
// nothing, with the reason in why_not(); the caller runs the work op by op instead. Recording is
// thread-local: other threads may allocate and synchronize meanwhile. A replay reads and writes the
// addresses the recording saw, so the memory it touches must stay where it was.
#include <shardgraph/cuda/check.hpp>

#include <cuda_runtime.h>

#include <optional>
#include <string>
#include <utility>

namespace shardgraph::cuda {

class stream_recording {
 public:
  stream_recording(const stream_recording&) = delete;
  stream_recording& operator=(const stream_recording&) = delete;
  stream_recording(stream_recording&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  stream_recording& operator=(stream_recording&& other) noexcept {
    if (this != &other) {
      release();
      exec_ = std::exchange(other.exec_, nullptr);
    }
    return *this;
  }
  ~stream_recording() { release(); }

  static void begin(cudaStream_t stream) {
    check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
               "stream recording (cudaStreamBeginCapture)");
  }

  // The recorded work, instantiated; nothing if a call in it could not be recorded (why_not()).
  static std::optional<stream_recording> end(cudaStream_t stream) {
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    static_cast<void>(cudaGetLastError());  // an invalidated recording leaves its error behind
    if (ended != cudaSuccess || graph == nullptr) {
      if (graph != nullptr) static_cast<void>(cudaGraphDestroy(graph));
      last_failure() = std::string(cudaGetErrorName(ended)) + ": " + cudaGetErrorString(ended);
      return std::nullopt;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    static_cast<void>(cudaGraphDestroy(graph));  // the instantiated graph stands alone
    if (made != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      last_failure() = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made);
      return std::nullopt;
    }
    return stream_recording(exec);
  }

  // Why the last end() returned nothing.
  static const std::string& why_not() { return last_failure(); }

  void replay(cudaStream_t stream) const {
    check_cuda(cudaGraphLaunch(exec_, stream), "stream recording (cudaGraphLaunch)");
  }

 private:
  explicit stream_recording(cudaGraphExec_t exec) : exec_(exec) {}
  static std::string& last_failure() {
    thread_local std::string why;
    return why;
  }
  void release() {
    if (exec_ != nullptr) static_cast<void>(cudaGraphExecDestroy(exec_));
    exec_ = nullptr;
  }

  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace shardgraph::cuda
