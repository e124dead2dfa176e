#pragma once
// world: N ranks as threads of this process, the library's embedded default communicator.
//
//   shardgraph::threads::world world(4);
//   world.run([](shardgraph::threads::communicator& comm) {
//     std::vector<double> x{double(comm.rank())};
//     comm.all_reduce(std::span(x));             // x == {6} on every rank
//   });
//
// run() calls fn on `ranks` threads (rank r on thread r) and joins them all. When fn throws on one
// rank, every other rank's pending or next communication throws shardgraph::error
// ("... aborted because rank 2 failed: <its message>"), and run() rethrows the first error itself
// (the original exception object). A rank that waits longer than `timeout` for its peers throws an
// error naming the collective, the rank and how many ranks arrived, instead of hanging.
#include <shardgraph/core/error.hpp>
#include <shardgraph/threads/communicator.hpp>
#include <shardgraph/threads/group.hpp>
#include <shardgraph/threads/text.hpp>
#include <shardgraph/threads/world_state.hpp>

#include <chrono>
#include <concepts>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

namespace shardgraph::threads {

class world {
 public:
  explicit world(int ranks, std::chrono::milliseconds timeout = std::chrono::minutes(5))
      : ranks_(ranks), timeout_(timeout) {
    if (ranks < 1)
      fail("threads::world", detail::text("a world of ", ranks, " ranks cannot run anything"),
           "Pass at least 1 rank");
    if (timeout <= std::chrono::milliseconds::zero())
      fail("threads::world", detail::text("the timeout of ", timeout.count(), " ms is not positive"),
           "Pass a positive timeout (the default is 5 minutes)");
  }

  int size() const { return ranks_; }

  template <class Fn>
  requires std::invocable<Fn&, communicator&>
  void run(Fn&& fn) const {
    auto state = std::make_shared<detail::world_state>(ranks_, timeout_);
    std::vector<int> everyone(ranks_);
    std::iota(everyone.begin(), everyone.end(), 0);
    auto all = std::make_shared<detail::group>(state, std::move(everyone));

    auto rank_body = [&](int rank) {
      try {
        communicator comm(all, rank);
        std::invoke(fn, comm);
      } catch (...) {
        state->fail(rank, std::current_exception());
      }
      state->mark_returned(rank);
    };
    std::vector<std::thread> threads;
    threads.reserve(ranks_);
    try {
      for (int rank = 0; rank < ranks_; ++rank) threads.emplace_back(rank_body, rank);
    } catch (...) {  // a thread could not start: the running ranks must not wait for it
      state->fail(static_cast<int>(threads.size()), std::current_exception());
    }
    for (auto& t : threads) t.join();
    if (auto first = state->first_error()) std::rethrow_exception(first);
  }

 private:
  int ranks_;
  std::chrono::milliseconds timeout_;
};

}  // namespace shardgraph::threads
