#pragma once
// comm_worker: a thread of one rank that runs collectives on a communicator of its own, so that
// the rank's main thread computes while they run. The executor reduces a full gradient bucket on it
// while backward makes the next bucket's gradients (what PyTorch DDP and NCCL's second stream do).
//
//   comm_worker<Comm> worker(dp.split(0, dp.rank()));   // a communicator nobody else calls
//   auto ticket = worker.post([data](Comm& c) { comm::all_reduce(c, data); });
//   ...                                                  // compute; `data` is the worker's now
//   worker.wait(ticket);                                 // the sum is in `data`
//
// Jobs run one at a time in the order they were posted, so every rank of the group meets them in
// the same order. A job that throws stops the worker: that job's and every later job's wait()
// rethrows its error, and later jobs are not run (their peers would wait for a collective that this
// rank no longer makes).
//
// Which communicators may be given to a worker: those whose allows_concurrent_groups() is true, so
// that a call on the worker's communicator may run while the main thread calls another group of the
// same rank (threads and nccl; mpi only under MPI_THREAD_MULTIPLE, which its world does not ask for).
//
// A worker destroyed with jobs still queued or running (the rank is unwinding from an error between
// post and wait) first calls the communicator's abort(why), where it has one: its peers may never
// join the job, because they wait for this rank elsewhere, so the job would otherwise end only at
// the timeout. The threads backend then wakes every rank with the error; the nccl backend aborts
// the NCCL communicator.
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include "shardgraph/core/error.hpp"

namespace shardgraph::comm {

// A communicator of which two groups of one rank may be called at the same time from two threads.
template <class C>
concept ConcurrentGroups = requires(const C& c) {
  { c.allows_concurrent_groups() } -> std::convertible_to<bool>;
};

template <class Comm>
class comm_worker {
 public:
  using job = std::function<void(Comm&)>;

  explicit comm_worker(Comm comm) : state_(std::make_unique<shared_state>(comm)), stopper_(std::move(comm)) {
    thread_ = std::thread([s = state_.get()] { s->serve(); });
  }
  comm_worker(const comm_worker&) = delete;
  comm_worker& operator=(const comm_worker&) = delete;

  ~comm_worker() {
    bool unfinished = false;
    {
      std::lock_guard lock(state_->mutex);
      // after a failure the jobs left are skipped, not run: none can wait for peers
      unfinished = state_->done < state_->posted && state_->failed_at == shared_state::never;
      state_->stop = true;
    }
    state_->changed.notify_all();
    if constexpr (requires(Comm & c, std::string_view why) { c.abort(why); })
      if (unfinished)
        stopper_.abort(
            "this rank stopped with an error while a collective of its communication thread was still "
            "queued or running");
    thread_.join();
  }

  // Queues fn to run on the worker's communicator; returns the ticket that wait() takes.
  std::uint64_t post(job fn) {
    std::uint64_t ticket = 0;
    {
      std::lock_guard lock(state_->mutex);
      state_->queue.push_back(std::move(fn));
      ticket = ++state_->posted;
    }
    state_->changed.notify_all();
    return ticket;
  }

  // Returns once the job of this ticket, and every job posted before it, has run; rethrows the
  // error of the first job that failed, if it was this one or an earlier one.
  void wait(std::uint64_t ticket) {
    std::unique_lock lock(state_->mutex);
    state_->changed.wait(lock, [&] { return state_->done >= ticket || state_->failed_at <= ticket; });
    if (state_->failed_at <= ticket) std::rethrow_exception(state_->error);
  }
  void wait_all() { wait(posted()); }

  std::uint64_t posted() const {
    std::lock_guard lock(state_->mutex);
    return state_->posted;
  }

 private:
  struct shared_state {
    explicit shared_state(Comm c) : comm(std::move(c)) {}

    void serve() {
      for (;;) {
        job next;
        {
          std::unique_lock lock(mutex);
          changed.wait(lock, [&] { return stop || !queue.empty(); });
          if (queue.empty()) return;  // stopped, and nothing left to run
          next = std::move(queue.front());
          queue.pop_front();
        }
        std::exception_ptr thrown;
        if (failed_at == never) {  // written only by this thread
          try {
            next(comm);
          } catch (...) {
            thrown = std::current_exception();
          }
        }
        {
          std::lock_guard lock(mutex);
          ++done;
          if (thrown) error = thrown, failed_at = done;
        }
        changed.notify_all();
      }
    }

    static constexpr std::uint64_t never = ~std::uint64_t{0};
    Comm comm;
    mutable std::mutex mutex;
    std::condition_variable changed;
    std::deque<job> queue;
    std::uint64_t posted = 0, done = 0;  // jobs posted and finished (tickets are 1, 2, ...)
    std::uint64_t failed_at = never;     // the ticket of the first job that threw
    std::exception_ptr error;
    bool stop = false;
  };

  std::unique_ptr<shared_state> state_;
  Comm stopper_;  // a handle on the same group, for abort() from the destructor's thread
  std::thread thread_;
};

}  // namespace shardgraph::comm
