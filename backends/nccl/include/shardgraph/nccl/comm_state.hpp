#pragma once
// comm_state: one rank's NCCL communicator, the CUDA stream its calls run on, and the wait that
// turns a hung or failed call into shardgraph::error.
//
// The NCCL communicators are non-blocking (ncclConfig_t::blocking = 0): every NCCL call returns at
// once, with ncclInProgress while NCCL still works on the host side (connection setup, a split).
// wait() then polls ncclCommGetAsyncError until the call is accepted and cudaStreamQuery until the
// stream has drained, up to the world's timeout. On a timeout, an NCCL or CUDA error, or the
// failure of another rank of this process, it aborts the communicator (ncclCommAbort), records the
// failure in the world_state so that the other local ranks stop too, and throws an error naming
// the rank, the call and the cause. An aborted communicator throws on every later call.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/device_buffer.hpp>
#include <shardgraph/cuda/device_guard.hpp>
#include <shardgraph/cuda/text.hpp>
#include <shardgraph/nccl/check.hpp>
#include <shardgraph/nccl/world_state.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace shardgraph::nccl::detail {

// The configuration of every communicator made here: non-blocking, so that no NCCL call can hold
// the calling thread past the deadline.
inline ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Busy-polls for the first hundred rounds (a small collective takes microseconds), then sleeps a
// little between rounds so that a long wait does not take a whole core from the other ranks.
inline void pause_between_polls(int round) {
  if (round < 100)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

class comm_state {
 public:
  // Takes ownership of `comm`, which must have finished initializing (ncclCommGetAsyncError says
  // ncclSuccess). world_rank: this rank's rank in the world it was split from (for messages).
  comm_state(ncclComm_t comm, int device, int world_rank, bool is_world, std::shared_ptr<world_state> world)
      : comm_(comm), device_(device), world_rank_(world_rank), is_world_(is_world), world_(std::move(world)) {
    try {
      const cuda::device_guard on(device_);
      check_nccl(ncclCommUserRank(comm_, &rank_), "nccl communicator", "ncclCommUserRank", comm_);
      check_nccl(ncclCommCount(comm_, &size_), "nccl communicator", "ncclCommCount", comm_);
      cuda::check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                       "nccl communicator (cudaStreamCreateWithFlags)");
      scratch_ = cuda::device_buffer(sizeof(std::uint32_t));
    } catch (...) {
      static_cast<void>(ncclCommAbort(comm_));
      if (stream_ != nullptr) static_cast<void>(cudaStreamDestroy(stream_));
      throw;
    }
  }

  // A communicator that failed, or whose world failed, is aborted; any other is destroyed, which
  // waits for its pending operations.
  ~comm_state() {
    int current = -1;
    const bool switch_device =
        cudaGetDevice(&current) == cudaSuccess && current != device_ && cudaSetDevice(device_) == cudaSuccess;
    if (comm_ != nullptr) static_cast<void>(world_->failed() ? ncclCommAbort(comm_) : ncclCommDestroy(comm_));
    scratch_ = cuda::device_buffer();
    if (stream_ != nullptr) static_cast<void>(cudaStreamDestroy(stream_));
    if (switch_device) static_cast<void>(cudaSetDevice(current));
    static_cast<void>(cudaGetLastError());
  }

  comm_state(const comm_state&) = delete;
  comm_state& operator=(const comm_state&) = delete;

  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  int world_rank() const { return world_rank_; }
  const std::shared_ptr<world_state>& world() const { return world_; }
  // One uint32 of device memory, for barrier's all_reduce (unsigned: its sum may wrap).
  std::uint32_t* scratch() { return scratch_.view<std::uint32_t>().data(); }

  // The `where` of every error message: "nccl all_gather, rank 1 of 2 (world rank 3)".
  std::string where(std::string_view op) const {
    auto w = cuda::detail::text("nccl ", op, ", rank ", rank_, " of ", size_);
    if (!is_world_) w += cuda::detail::text(" (world rank ", world_rank_, ")");
    return w;
  }

  // Throws if this communicator can no longer be used: aborted already, or its world failed.
  void check_usable(std::string_view op) {
    if (comm_ == nullptr)
      fail(where(op), "this communicator was aborted after an earlier failure: " + world_->failure_text(),
           "Fix the first failure, then make a new nccl::world");
    if (world_->failed()) abort_because_of_peer(op);
  }

  // Checks the result of an NCCL call that enqueues work; on failure, aborts and throws.
  void check_call(ncclResult_t result, std::string_view op, std::string_view call) {
    if (result == ncclSuccess || result == ncclInProgress) return;
    abort_and_fail(op, describe(call, result, comm_), how_to_fix(result));
  }

  // Waits until every call issued on this communicator has been accepted by NCCL and has finished on
  // the stream; see the top of this file.
  void wait(std::string_view op) {
    const auto deadline = std::chrono::steady_clock::now() + world_->timeout();
    for (int round = 0;; ++round) {
      ncclResult_t state = ncclSuccess;
      check_call(ncclCommGetAsyncError(comm_, &state), op, "ncclCommGetAsyncError");
      if (state != ncclSuccess && state != ncclInProgress)
        abort_and_fail(op, describe("the NCCL operation", state, comm_), how_to_fix(state));
      if (state == ncclSuccess) {
        const cudaError_t stream_state = cudaStreamQuery(stream_);
        if (stream_state == cudaSuccess) return;
        if (stream_state != cudaErrorNotReady) {
          static_cast<void>(cudaGetLastError());
          abort_and_fail(op,
                         cuda::detail::text("the stream failed: ", cudaGetErrorString(stream_state), " (",
                                            cudaGetErrorName(stream_state), ")"),
                         cuda::how_to_fix(stream_state));
        }
      }
      poll_peers_and_deadline(op, deadline);
      pause_between_polls(round);
    }
  }

  // Between polls of a wait: throws (after aborting) if another local rank failed, if every other
  // local rank has returned, or if the deadline has passed.
  void poll_peers_and_deadline(std::string_view op, std::chrono::steady_clock::time_point deadline) {
    if (world_->failed()) abort_because_of_peer(op);
    if (size_ > 1 && world_->others_returned())
      abort_and_fail(op, "every other rank has returned from its function, so none can join this call",
                     "Call the same collectives in the same order on every rank of the group");
    if (std::chrono::steady_clock::now() > deadline)
      abort_and_fail(op,
                     cuda::detail::text("the call did not complete within ", world_->timeout().count(),
                                        " ms, so the communicator was aborted"),
                     "Check that every rank of the group makes the same calls in the same order with the "
                     "same sizes (a send needs its recv), or pass a longer timeout to nccl::world");
  }

  // Aborts the communicator, records the failure for the other local ranks, and throws.
  [[noreturn]] void abort_and_fail(std::string_view op, const std::string& why, std::string_view how) {
    const std::string message = error_message(where(op), why, how);
    abort();
    world_->fail(world_rank_, message);
    throw error(message);
  }

  // Releases the NCCL communicator at once, ending its pending operations.
  void abort() noexcept {
    if (comm_ == nullptr) return;
    int current = -1;
    const bool switch_device =
        cudaGetDevice(&current) == cudaSuccess && current != device_ && cudaSetDevice(device_) == cudaSuccess;
    static_cast<void>(ncclCommAbort(comm_));
    comm_ = nullptr;
    if (switch_device) static_cast<void>(cudaSetDevice(current));
  }

 private:
  [[noreturn]] void abort_because_of_peer(std::string_view op) {
    abort();
    fail(where(op), "aborted because " + world_->failure_text(),
         "Fix the first failure; this rank stopped instead of waiting for it forever");
  }

  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
  int device_;
  int world_rank_;
  bool is_world_;
  std::shared_ptr<world_state> world_;
  cuda::device_buffer scratch_;
};

}  // namespace shardgraph::nccl::detail
