#pragma once
// group: the shared state of one communicator group (the world, or a group made by split).
//
// A collective is one rendezvous:
//   arrive (post this rank's slot, wait for all)
//   -> every rank checks all slots and computes its own part, reading its peers' buffers
//   -> depart (wait for all),
// so no rank returns, and reuses its buffers, while a peer may still read them. Both waits are
// the same generation-counted barrier. Point-to-point messages are copied into the receiver's
// inbox, so a send never waits for its recv.
//
// Every wait gives up, and throws shardgraph::error, when another rank has failed, when a rank it
// waits for has returned from its function, or after the world's timeout; the first failure is
// recorded in world_state, which wakes every waiting rank of every group.
#include <shardgraph/core/error.hpp>
#include <shardgraph/threads/message.hpp>
#include <shardgraph/threads/slot.hpp>
#include <shardgraph/threads/text.hpp>
#include <shardgraph/threads/world_state.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardgraph::threads::detail {

class group {
 public:
  // Group rank i is world rank members[i].
  group(std::shared_ptr<world_state> world, std::vector<int> members)
      : world_(std::move(world)),
        members_(std::move(members)),
        slots_(members_.size()),
        arrived_(members_.size(), false),
        inboxes_(members_.size()) {
    is_world_ = static_cast<int>(members_.size()) == world_->size();
    for (int r = 0; r < size(); ++r) is_world_ = is_world_ && members_[r] == r;
    std::lock_guard lock(world_->mutex);
    world_->add_waiters_locked(&wakeups_);
  }
  ~group() {
    std::lock_guard lock(world_->mutex);
    world_->remove_waiters_locked(&wakeups_);
  }
  group(const group&) = delete;
  group& operator=(const group&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  int world_rank(int rank) const { return members_[rank]; }
  const std::shared_ptr<world_state>& world() const { return world_; }

  // The `where` of every error message: "threads all_gather, rank 1 of 2 (world rank 3)".
  std::string where(std::string_view op, int rank) const {
    auto w = text("threads ", op, ", rank ", rank, " of ", size());
    if (!is_world_) w += text(" (world rank ", world_rank(rank), ")");
    return w;
  }

  // Any rank may read any slot between arrive and depart of the same collective.
  const slot& slot_of(int rank) const { return slots_[rank]; }
  // The owner may set fields of its slot that no peer reads before the next wait (split's `created`).
  slot& own_slot(int rank) { return slots_[rank]; }

  void arrive(int rank, slot mine) {
    slot previous;  // destroyed after the lock is released: it may hold the last reference to a group
    std::unique_lock lock(world_->mutex);
    previous = std::exchange(slots_[rank], std::move(mine));
    wait_for_all_locked(lock, rank, slots_[rank].op);
  }
  void depart(int rank, std::string_view op) {
    std::unique_lock lock(world_->mutex);
    wait_for_all_locked(lock, rank, op);
  }

  void deposit(int destination, message m) {
    std::lock_guard lock(world_->mutex);
    if (world_->failed_locked()) world_->throw_aborted_locked(where("send", m.source));
    inboxes_[destination].push_back(std::move(m));
    wakeups_.notify_all();
  }

  // Blocks until a message from `source` with `tag` reaches `rank`; takes the first one sent.
  message take(int rank, int source, int tag) {
    std::unique_lock lock(world_->mutex);
    auto& inbox = inboxes_[rank];
    const auto deadline = std::chrono::steady_clock::now() + world_->timeout;
    for (bool timed_out = false;;
         timed_out = wakeups_.wait_until(lock, deadline) == std::cv_status::timeout) {
      if (world_->failed_locked()) world_->throw_aborted_locked(where("recv", rank));
      auto match = std::find_if(inbox.begin(), inbox.end(),
                                [&](const message& m) { return m.source == source && m.tag == tag; });
      if (match != inbox.end()) {
        message m = std::move(*match);
        inbox.erase(match);
        return m;
      }
      if (world_->returned_locked(world_rank(source)))
        raise_locked(rank, "recv",
                     text("rank ", source, " returned from its function without sending a message with tag ",
                          tag, " to rank ", rank),
                     "Pair every recv with a send of the same tag on the peer");
      if (timed_out)
        raise_locked(
            rank, "recv",
            text("timed out after ", world_->timeout.count(), " ms waiting for a message from rank ", source,
                 " with tag ", tag),
            "Pair every recv with a send of the same tag on the peer, or give the world a longer timeout");
    }
  }

  // Records the error as this rank's failure, which wakes every waiting rank, and throws it.
  [[noreturn]] void raise(int rank, std::string_view op, std::string_view why, std::string_view how) {
    std::lock_guard lock(world_->mutex);
    raise_locked(rank, op, why, how);
  }

 private:
  [[noreturn]] void raise_locked(int rank, std::string_view op, std::string_view why, std::string_view how) {
    error e(error_message(where(op, rank), why, how));
    world_->fail_locked(world_rank(rank), std::make_exception_ptr(e));
    throw e;
  }

  // The barrier: returns on every member once all `size()` members have called it.
  void wait_for_all_locked(std::unique_lock<std::mutex>& lock, int rank, std::string_view op) {
    if (world_->failed_locked()) world_->throw_aborted_locked(where(op, rank));
    const auto generation = generation_;
    arrived_[rank] = true;
    if (++arrived_count_ == size()) {
      std::fill(arrived_.begin(), arrived_.end(), false);
      arrived_count_ = 0;
      ++generation_;
      wakeups_.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + world_->timeout;
    for (bool timed_out = false;;
         timed_out = wakeups_.wait_until(lock, deadline) == std::cv_status::timeout) {
      if (generation_ != generation) return;
      if (world_->failed_locked()) world_->throw_aborted_locked(where(op, rank));
      for (int r = 0; r < size(); ++r)
        if (!arrived_[r] && world_->returned_locked(world_rank(r)))
          raise_locked(rank, op, text("rank ", r, " returned from its function without calling ", op),
                       "Call the same collectives in the same order on every rank of the group");
      if (timed_out)
        raise_locked(rank, op,
                     text("timed out after ", world_->timeout.count(), " ms: ", arrived_count_, " of ",
                          size(), " ranks arrived (missing: ", missing_ranks_locked(), ")"),
                     "Call the same collectives in the same order on every rank of the group, or give the "
                     "world a longer timeout");
    }
  }

  std::string missing_ranks_locked() const {
    std::string missing;
    for (int r = 0; r < size(); ++r)
      if (!arrived_[r]) missing += text(missing.empty() ? "rank " : ", ", r);
    return missing;
  }

  std::shared_ptr<world_state> world_;
  std::vector<int> members_;  // (group ranks) -> world rank
  bool is_world_ = false;

  // Guarded by world_->mutex:
  std::condition_variable wakeups_;
  std::vector<slot> slots_;    // (group ranks)
  std::vector<bool> arrived_;  // (group ranks) in the current generation
  int arrived_count_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<std::deque<message>> inboxes_;  // (group ranks) messages waiting for their recv
};

}  // namespace shardgraph::threads::detail
