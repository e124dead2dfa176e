#pragma once
// world_state: what every rank of one world::run shares.
//  - `mutex` guards all rendezvous state of every group of the run (one lock keeps the failure
//    protocol simple; it is held only for bookkeeping, never while buffers are read or written);
//  - the first failure: once a rank fails, every waiting rank of every group wakes up and throws;
//  - which ranks have returned from their function, so that a rank waiting for one of them fails
//    at once instead of after the timeout.
// Members named *_locked expect `mutex` to be held by the caller.
#include <shardgraph/core/error.hpp>
#include <shardgraph/threads/text.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace shardgraph::threads::detail {

class world_state {
 public:
  world_state(int ranks, std::chrono::milliseconds timeout) : timeout(timeout), returned_(ranks, false) {}

  int size() const { return static_cast<int>(returned_.size()); }

  std::mutex mutex;
  const std::chrono::milliseconds timeout;  // the longest any rank waits for its peers

  bool failed_locked() const { return first_error_ != nullptr; }

  // Records the first failure (later ones are ignored) and wakes every waiting rank of every group.
  // A provisional failure is recorded for a rank still unwinding from an error of its own
  // (communicator::abort); that rank's own error, when its function ends, replaces it as the error
  // run() rethrows.
  void fail_locked(int world_rank, const std::exception_ptr& error, bool provisional = false) {
    if (failed_locked()) {
      if (!provisional_ || provisional || world_rank != failed_rank_) return;
      first_error_ = error;
      provisional_ = false;
      return;
    }
    first_error_ = error;
    failed_rank_ = world_rank;
    failed_message_ = message_of(error);
    provisional_ = provisional;
    wake_all_locked();
  }
  void fail(int world_rank, const std::exception_ptr& error, bool provisional = false) {
    std::lock_guard lock(mutex);
    fail_locked(world_rank, error, provisional);
  }

  // Throws the error a rank gets when it meets a failure of another rank.
  [[noreturn]] void throw_aborted_locked(std::string_view where) const {
    std::string_view first = failed_message_;
    if (first.ends_with('.')) first.remove_suffix(1);
    shardgraph::fail(
        where, text("aborted because rank ", failed_rank_, " failed: ", first),
        text("Fix the error of rank ", failed_rank_, "; the other ranks stop so that the run does not hang"));
  }

  std::exception_ptr first_error() {
    std::lock_guard lock(mutex);
    return first_error_;
  }

  void mark_returned(int world_rank) {
    std::lock_guard lock(mutex);
    returned_[world_rank] = true;
    wake_all_locked();
  }
  bool returned_locked(int world_rank) const { return returned_[world_rank]; }

  // Every group registers the condition variable its ranks wait on, so that a failure reaches them.
  void add_waiters_locked(std::condition_variable* waiters) { waiters_.push_back(waiters); }
  void remove_waiters_locked(std::condition_variable* waiters) { std::erase(waiters_, waiters); }

 private:
  void wake_all_locked() {
    for (auto* waiters : waiters_) waiters->notify_all();
  }

  static std::string message_of(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "an exception that is not a std::exception";
    }
  }

  std::exception_ptr first_error_;
  int failed_rank_ = -1;
  std::string failed_message_;
  bool provisional_ = false;
  std::vector<bool> returned_;  // (world ranks)
  std::vector<std::condition_variable*> waiters_;
};

}  // namespace shardgraph::threads::detail
