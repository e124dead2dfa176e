#pragma once
// replica_inbox: the requests and cancellations that reach one replica of a running engine
// (engine.hpp) from any thread, handed to all its ranks alike, so that their schedulers stay the
// same and their steps and collectives meet.
//
//   any thread:  inbox.post({.kind = engine_command::submit, .handle = 7, .request = r});
//   every rank, at its step boundary b = 0, 1, 2, ...:
//     step_orders o = inbox.orders(comm.rank(), b, /*idle=*/!s.has_work());
//
// Rank 0 cuts: at its boundary b it takes everything posted since its last cut as the orders of
// b (waiting on a condition variable while it is idle and nothing is posted: an idle engine does
// not spin). The other ranks wait for rank 0's orders of the same b. So every rank applies the
// same commands before the same step. The orders of b are dropped once all ranks have read them.
//
// This is a shared-memory hand-off, for worlds whose ranks are threads of one process
// (threads::world, or one process driving its GPUs). Ranks in several processes (MPI, NCCL over
// hosts) would need rank 0 to broadcast each boundary's orders (a length, then the serialized
// commands) over the replica's communicator before the step, with the requests reaching rank 0
// only.
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "shardgraph/generate/request.hpp"

namespace shardgraph::generate {

struct engine_command {
  enum kind_type { submit, cancel } kind = submit;
  std::int64_t handle = 0;       // the engine's request handle
  generation_request request{};  // for submit
};

// What every rank of a replica applies at one step boundary, in this order.
struct step_orders {
  std::vector<engine_command> commands{};
  bool cancel_all = false;  // cancel every request the scheduler holds (shutdown)
  bool stop = false;        // end the run once the scheduler has no work
  bool aborted = false;     // a rank failed: end the run now
};

class replica_inbox {
 public:
  explicit replica_inbox(int ranks) : ranks_(ranks) {}

  void post(engine_command command) {
    {
      const std::lock_guard<std::mutex> guard(lock_);
      pending_.commands.push_back(std::move(command));
    }
    changed_.notify_all();
  }
  // Ends the run: at the next boundary, after cancelling everything when `cancel` (else once the
  // requests posted so far have finished).
  void stop(bool cancel) {
    {
      const std::lock_guard<std::mutex> guard(lock_);
      pending_.stop = true;
      pending_.cancel_all = pending_.cancel_all || cancel;
    }
    changed_.notify_all();
  }
  // A rank failed: the ranks waiting here stop waiting.
  void abort() {
    {
      const std::lock_guard<std::mutex> guard(lock_);
      aborted_ = true;
    }
    changed_.notify_all();
  }
  // Submits posted and not yet cut (waiting in no scheduler yet).
  std::int64_t posted_submits() const {
    const std::lock_guard<std::mutex> guard(lock_);
    std::int64_t n = 0;
    for (const engine_command& c : pending_.commands) n += c.kind == engine_command::submit ? 1 : 0;
    return n;
  }

  // Rank `rank`'s orders for its step boundary `boundary` (0, 1, 2, ... on every rank).
  step_orders orders(int rank, std::int64_t boundary, bool idle) {
    std::unique_lock<std::mutex> guard(lock_);
    if (rank == 0) {
      changed_.wait(guard, [&] {
        return aborted_ || !idle || stopping_ || !pending_.commands.empty() || pending_.stop;
      });
      stopping_ = stopping_ || pending_.stop;
      cut_[boundary] = {std::exchange(pending_, {}), ranks_};
      changed_.notify_all();
    } else {
      changed_.wait(guard, [&] { return aborted_ || cut_.contains(boundary); });
    }
    if (aborted_) return {.aborted = true};
    auto it = cut_.find(boundary);
    step_orders orders = it->second.orders;
    if (--it->second.readers == 0) cut_.erase(it);
    return orders;
  }

 private:
  struct cut {
    step_orders orders;
    int readers = 0;  // ranks yet to read them
  };

  int ranks_;
  mutable std::mutex lock_;
  std::condition_variable changed_;
  step_orders pending_;
  std::map<std::int64_t, cut> cut_;
  bool stopping_ = false, aborted_ = false;
};

}  // namespace shardgraph::generate
