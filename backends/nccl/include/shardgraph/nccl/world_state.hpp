#pragma once
// world_state: what the ranks of one process share, so that a failure on one rank stops the others
// instead of leaving them waiting in NCCL for a peer that will never come.
//
// Every communicator of a world (and every one split from it) polls this state while it waits:
// once a rank has failed, the others abort their NCCL communicators and throw an error naming the
// first failure. Ranks in other processes cannot see it: they stop at their own timeout.
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

#include <shardgraph/cuda/text.hpp>

namespace shardgraph::nccl::detail {

class world_state {
 public:
  // local_ranks: the ranks of this world in this process. all_local: whether they are all its ranks.
  world_state(int local_ranks, bool all_local, std::chrono::milliseconds timeout)
      : timeout_(timeout), local_ranks_(local_ranks), all_local_(all_local) {}

  std::chrono::milliseconds timeout() const { return timeout_; }

  bool failed() const { return failed_.load(std::memory_order_acquire); }

  // Records the first failure; later ones are ignored. world_rank: the rank that failed.
  void fail(int world_rank, const std::string& message) {
    std::lock_guard lock(mutex_);
    if (failed_.load(std::memory_order_relaxed)) return;
    first_rank_ = world_rank;
    first_message_ = message;
    failed_.store(true, std::memory_order_release);
  }

  int first_failed_rank() const {
    std::lock_guard lock(mutex_);
    return first_rank_;
  }

  // "rank 2 failed: <its message>"
  std::string failure_text() const {
    std::lock_guard lock(mutex_);
    return cuda::detail::text("rank ", first_rank_, " failed: ", first_message_);
  }

  // world::run counts the ranks that have returned from their function. When every other rank of a
  // world whose ranks all live here has returned, none can join a pending call.
  void begin_run() { returned_.store(0, std::memory_order_release); }
  void mark_returned() { returned_.fetch_add(1, std::memory_order_acq_rel); }
  bool others_returned() const {
    return all_local_ && local_ranks_ > 1 && returned_.load(std::memory_order_acquire) >= local_ranks_ - 1;
  }

 private:
  std::chrono::milliseconds timeout_;
  int local_ranks_;
  bool all_local_;
  std::atomic<bool> failed_{false};
  std::atomic<int> returned_{0};
  mutable std::mutex mutex_;
  int first_rank_ = -1;
  std::string first_message_;
};

}  // namespace shardgraph::nccl::detail
