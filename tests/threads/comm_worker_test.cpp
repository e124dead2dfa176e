// comm_worker on thread ranks: its jobs run on their own thread and communicator while the main
// thread calls another group, in the order they were posted; a job's error reaches its wait and
// every later one; a rank that fails with a job pending stops every rank at once with its own error.
//
// Catch2's assertions are not thread-safe: ranks record what they saw, and the test thread checks
// it after world::run has joined them.
#include <shardgraph/comm/comm_worker.hpp>
#include <shardgraph/threads.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"

namespace sg = shardgraph;
using sg::threads::communicator;
using sg::threads::world;
using worker = sg::comm::comm_worker<communicator>;

static_assert(sg::comm::ConcurrentGroups<communicator>);

namespace {
using shardgraph::testing::ContainsSubstring;
}  // namespace

TEST_CASE("comm_worker: jobs run on their own communicator while the main thread calls another group",
          "[threads][comm_worker]") {
  constexpr int ranks = 3;
  struct seen {
    bool ran_before_release = true;
    std::vector<double> first, second, main;
    std::vector<int> order;
  };
  std::vector<seen> by_rank(ranks);
  world(ranks).run([&](communicator& comm) {
    seen& s = by_rank[static_cast<std::size_t>(comm.rank())];
    worker w(comm.split(0, comm.rank()));
    std::atomic<bool> release = false, first_done = false;
    std::vector<double> first{1.0 + comm.rank(), 10.0}, second{100.0 * comm.rank()};
    std::vector<int> order;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the worker sleeps when a job comes
    const std::uint64_t a = w.post([&](communicator& c) {
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      c.all_reduce(std::span(first));
      order.push_back(1);
      first_done = true;
    });
    const std::uint64_t b = w.post([&](communicator& c) {
      c.all_reduce(std::span(second));
      order.push_back(2);
    });
    // post() returned while the first job waits: the main thread makes a collective of its own.
    std::vector<double> main{static_cast<double>(comm.rank())};
    comm.all_reduce(std::span(main));
    s.ran_before_release = first_done.load();
    release = true;
    w.wait(b);  // and so a, posted before it
    w.wait(a);
    s.first = first, s.second = second, s.main = main, s.order = order;
  });
  for (const seen& s : by_rank) {
    CHECK_FALSE(s.ran_before_release);
    CHECK(s.first == std::vector<double>{6.0, 30.0});  // 1 + 2 + 3, 10 * 3
    CHECK(s.second == std::vector<double>{300.0});     // 0 + 100 + 200
    CHECK(s.main == std::vector<double>{3.0});
    CHECK(s.order == std::vector<int>{1, 2});
  }
}

TEST_CASE("comm_worker: a job's error reaches its wait and every later one; later jobs do not run",
          "[threads][comm_worker]") {
  std::string at_failed, at_later;
  bool later_ran = true, earlier_ran = false;
  world(1).run([&](communicator& comm) {
    worker w(comm.split(0, 0));
    const std::uint64_t earlier = w.post([&](communicator&) { earlier_ran = true; });
    const std::uint64_t failing =
        w.post([](communicator&) { sg::fail("test job", "it fails on purpose", "nothing to fix"); });
    later_ran = false;
    const std::uint64_t later = w.post([&](communicator&) { later_ran = true; });
    w.wait(earlier);  // finished before the failure: no error
    try {
      w.wait(failing);
    } catch (const sg::error& e) {
      at_failed = e.what();
    }
    try {
      w.wait(later);
    } catch (const sg::error& e) {
      at_later = e.what();
    }
  });
  CHECK(earlier_ran);
  CHECK_FALSE(later_ran);
  CHECK_THAT(at_failed, ContainsSubstring("it fails on purpose"));
  CHECK(at_later == at_failed);
}

TEST_CASE("comm_worker: a rank that fails with a job pending stops every rank at once, with its own error",
          "[threads][comm_worker]") {
  // Rank 0 posts an all_reduce and fails; rank 1 waits in a barrier of the other group, which rank 0
  // never joins, so it never posts its half of the job. Without the abort from the worker's
  // destructor, rank 0 would wait in that job until the one-minute timeout.
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    world(2, std::chrono::minutes(1)).run([](communicator& comm) {
      worker w(comm.split(0, comm.rank()));
      std::vector<double> x{1.0};
      if (comm.rank() == 0) {
        w.post([&](communicator& c) { c.all_reduce(std::span(x)); });
        sg::fail("rank 0's step", "its own failure", "nothing to fix");
      }
      comm.barrier();
      w.post([&](communicator& c) { c.all_reduce(std::span(x)); });
      w.wait_all();
    });
  } catch (const sg::error& e) {
    message = e.what();
  }
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK_THAT(message, ContainsSubstring("its own failure"));  // not the abort's message
  CHECK(seconds < 30);
}
