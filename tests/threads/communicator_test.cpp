// The threads communicator: the Communicator contract (tests/comm/communicator_contract.hpp) on 1,
// 2, 3, 4 and 8 ranks, then what only this backend does: a barrier seen from shared memory,
// sub-groups running concurrently, the cross-rank checks of sizes, types and roots, and the failures
// (a throwing rank, a timeout) that must throw on every rank instead of hanging.
//
// Catch2's assertions are not thread-safe: ranks only record what they saw, and the test thread
// checks it after world::run has joined them.
#include <shardgraph/comm/collectives.hpp>
#include <shardgraph/comm/communicator.hpp>
#include <shardgraph/threads.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "catch.hpp"
#include "comm/communicator_contract.hpp"

namespace sg = shardgraph;
using sg::threads::communicator;
using sg::threads::world;

namespace {

using shardgraph::testing::ContainsSubstring;

// The message of the shardgraph::error that run() throws; empty if it throws none.
template <class Fn>
std::string error_of(const world& w, Fn&& fn) {
  try {
    w.run(fn);
  } catch (const sg::error& e) {
    return e.what();
  }
  return "";
}

// Runs fn on every rank, keeping the message of the shardgraph::error each rank throws.
template <class Fn>
std::vector<std::string> errors_per_rank(const world& w, Fn&& fn) {
  std::vector<std::string> messages;
  for (auto& [rank, message] : communicator_contract::errors_of_threads<communicator>(w, fn))
    messages.push_back(std::move(message));
  return messages;
}

struct custom_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The contract's fixture: p ranks as threads of a world made for the call; host memory.
struct threads_fixture : communicator_contract::host_buffers {
  using communicator = sg::threads::communicator;
  static constexpr bool sums_in_rank_order = true, buffered_sends = true, matches_tags = true,
                        sums_16_bit_integers = true, all_to_all_in_place = false, host_memory = true;

  static std::vector<int> rank_counts() { return {1, 2, 3, 4, 8}; }

  template <class Fn>
  static auto run(int p, Fn&& fn) {
    return communicator_contract::run_threads<communicator>(world(p, std::chrono::seconds(10)), fn);
  }
  template <class Fn>
  static std::map<int, std::string> errors(int p, Fn&& fn) {
    return communicator_contract::errors_of_threads<communicator>(world(p, std::chrono::seconds(10)), fn);
  }
};

}  // namespace

using communicator_fixtures = std::tuple<threads_fixture>;
#include "comm/communicator_contract_collectives.hpp"
#include "comm/communicator_contract_groups.hpp"

TEST_CASE("threads::world rejects a world without ranks", "[threads]") {
  CHECK_THROWS_AS(world(0), sg::error);
  CHECK_THROWS_WITH(world(2, std::chrono::milliseconds(0)), ContainsSubstring("timeout"));
}

TEST_CASE("threads::communicator barrier: no rank leaves before every rank has arrived", "[threads]") {
  const int p = GENERATE(1, 2, 3, 4, 8);
  const world w(p);
  std::atomic<int> arrived = 0;
  std::vector<int> seen(static_cast<std::size_t>(p));
  w.run([&](communicator& comm) {
    ++arrived;
    comm.barrier();
    seen[static_cast<std::size_t>(comm.rank())] = arrived.load();
  });
  for (int count : seen) CHECK(count == p);
}

TEST_CASE("threads::communicator sub-groups run concurrently", "[threads]") {
  // Row 1 waits until row 0 has finished a collective on its own row: if sub-groups waited for
  // each other, this would deadlock and the 2 s timeout would fail the test.
  const world w(4, std::chrono::seconds(2));
  std::promise<void> row0_done;
  auto row0_done_future = row0_done.get_future().share();
  std::vector<double> sums(4);
  w.run([&](communicator& comm) {
    const int row = comm.rank() / 2;
    auto rows = comm.split(row, comm.rank());
    if (row == 1) row0_done_future.wait();
    std::vector<double> x{1.0 + comm.rank()};
    for (int i = 0; i < 50; ++i) rows.barrier();
    sg::comm::all_reduce(rows, x);
    if (row == 0 && rows.rank() == 0) row0_done.set_value();
    sums[comm.rank()] = x[0];
  });
  CHECK(sums == std::vector<double>{3, 3, 7, 7});
}

TEST_CASE("threads::communicator finds size mismatches on every rank", "[threads]") {
  const world w(3, std::chrono::seconds(2));

  SECTION("all_gather: one rank's out is not size * in") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      std::vector<float> in(2), out(comm.rank() == 1 ? 5 : 6);
      sg::comm::all_gather(comm, in, out);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("all_gather") && ContainsSubstring("rank 1's out holds 5 elements") &&
                        ContainsSubstring("3 * 2 = 6"));
  }

  SECTION("all_reduce: ranks pass different sizes") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      std::vector<double> data(comm.rank() == 2 ? 3 : 4);
      sg::comm::all_reduce(comm, data);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("shardgraph: threads all_reduce, rank ") &&
                        ContainsSubstring("rank 2's data holds 3 elements but rank 0's holds 4"));
  }

  SECTION("reduce_scatter: in is not size * out") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      std::vector<double> in(7), out(2);
      sg::comm::reduce_scatter(comm, in, out);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("reduce_scatter") && ContainsSubstring("3 * 2 = 6"));
  }

  SECTION("all_to_all: buffers do not split into size chunks") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      std::vector<std::int64_t> in(4), out(4);
      sg::comm::all_to_all(comm, in, out);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("all_to_all") && ContainsSubstring("do not split into 3 equal chunks"));
  }

  SECTION("all_to_all: in and out overlap") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      std::vector<double> buffer(3);
      sg::comm::all_to_all(comm, std::span<const double>(buffer), std::span<double>(buffer));
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("all_to_all") && ContainsSubstring("overlap"));
  }

  SECTION("broadcast: root out of range, or different roots") {
    const int root = GENERATE(3, -1);
    auto messages = errors_per_rank(w, [&](communicator& comm) {
      std::vector<double> data(2);
      sg::comm::broadcast(comm, data, root);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("broadcast") && ContainsSubstring("is not a rank"));
    messages = errors_per_rank(w, [&](communicator& comm) {
      std::vector<double> data(2);
      sg::comm::broadcast(comm, data, comm.rank() == 0 ? 0 : 1);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("rank 0 passes root 0 but rank 1 passes root 1"));
  }

  SECTION("ranks call different collectives, or pass different element types") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      std::vector<double> data(2);
      if (comm.rank() == 1)
        comm.barrier();
      else
        sg::comm::all_reduce(comm, data);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("rank 0 called all_reduce but rank 1 called barrier"));
    messages = errors_per_rank(w, [](communicator& comm) {
      if (comm.rank() == 2)
        sg::comm::all_reduce(comm, std::vector<float>(2));
      else
        sg::comm::all_reduce(comm, std::vector<double>(2));
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("rank 0 passes double elements but rank 2 passes float"));
  }

  SECTION("a sub-group's mismatch names the world rank too") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      auto pair = comm.split(comm.rank() == 0 ? 0 : 1, 0);  // {0}, {1, 2}
      if (comm.rank() == 0) return;
      std::vector<double> in(1), out(comm.rank() == 2 ? 3 : 2);
      sg::comm::all_gather(pair, in, out);
    });
    CHECK_THAT(messages[2], ContainsSubstring("threads all_gather, rank 1 of 2 (world rank 2)") &&
                                ContainsSubstring("rank 1's out holds 3 elements"));
  }
}

TEST_CASE("threads::communicator checks peers and message sizes", "[threads]") {
  const world w(2, std::chrono::seconds(2));
  CHECK_THAT(
      error_of(w, [](communicator& comm) { sg::comm::send(comm, std::vector<int>{1}, 2); }),
      ContainsSubstring("threads send") && ContainsSubstring("peer 2 is not a rank of this group of 2"));
  CHECK_THAT(error_of(w, [](communicator& comm) { sg::comm::send(comm, std::vector<int>{1}, comm.rank()); }),
             ContainsSubstring("names itself as the peer"));
  CHECK_THAT(
      error_of(w,
               [](communicator& comm) {
                 if (comm.rank() == 0)
                   sg::comm::send(comm, std::vector<int>{1, 2, 3, 4}, 1, 9);
                 else {
                   std::vector<int> x(3);
                   sg::comm::recv(comm, x, 0, 9);
                 }
               }),
      ContainsSubstring("threads recv, rank 1 of 2") &&
          ContainsSubstring("rank 0 sent 4 int32 elements with tag 9 but rank 1 receives 3 int32 elements"));
  CHECK_THAT(error_of(w,
                      [](communicator& comm) {
                        std::vector<int> x(1);
                        if (comm.rank() == 1) sg::comm::recv(comm, x, 0, 4);
                      }),
             ContainsSubstring("rank 0 returned from its function without sending a message with tag 4"));
  CHECK_THAT(error_of(w,
                      [](communicator& comm) {
                        if (comm.rank() == 0) comm.barrier();
                      }),
             ContainsSubstring(
                 "threads barrier, rank 0 of 2: rank 1 returned from its function without calling barrier"));
}

TEST_CASE("threads::world stops every rank when one throws, and rethrows that error", "[threads]") {
  const world w(4, std::chrono::seconds(30));  // a hang would show as a slow test, not a pass
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> messages(4);

  SECTION("ranks waiting in a collective of the world") {
    CHECK_THROWS_AS(w.run([&](communicator& comm) {
      try {
        if (comm.rank() == 2) throw custom_failure("the data loader broke");
        std::vector<double> x(3);
        for (;;) sg::comm::all_reduce(comm, x);
      } catch (const sg::error& e) {
        messages[comm.rank()] = e.what();
        throw;
      }
    }),
                    custom_failure);
    for (int r : {0, 1, 3})
      CHECK_THAT(messages[r], ContainsSubstring("threads all_reduce, rank " + std::to_string(r) + " of 4") &&
                                  ContainsSubstring("aborted because rank 2 failed: the data loader broke"));
  }

  SECTION("ranks waiting in sub-groups and in recv") {
    try {
      w.run([&](communicator& comm) {
        auto rows = comm.split(comm.rank() / 2, 0);
        try {
          std::vector<int> x(1);
          // Each waits for a rank that waits for another: only rank 3's failure can end this.
          if (comm.rank() == 3) throw custom_failure("stage 3 ran out of memory");
          if (comm.rank() == 2) sg::comm::recv(rows, x, 1);
          if (comm.rank() == 1) comm.barrier();
          if (comm.rank() == 0) rows.barrier();
        } catch (const sg::error& e) {
          messages[comm.rank()] = e.what();
          throw;
        }
      });
      FAIL("run() did not throw");
    } catch (const custom_failure& e) {
      CHECK(std::string(e.what()) == "stage 3 ran out of memory");
    }
    CHECK_THAT(messages[2],
               ContainsSubstring("threads recv, rank 0 of 2 (world rank 2): aborted because rank 3 failed"));
    CHECK_THAT(messages[1],
               ContainsSubstring("threads barrier, rank 1 of 4: aborted because rank 3 failed: stage 3"));
    CHECK_THAT(messages[0],
               ContainsSubstring("threads barrier, rank 0 of 2 (world rank 0): aborted because rank 3"));
  }

  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
}

TEST_CASE("threads::world keeps working after a failed run", "[threads]") {
  const world w(2);
  CHECK_THROWS_AS(w.run([](communicator& comm) {
    if (comm.rank() == 0) throw std::logic_error("bad");
    comm.barrier();
  }),
                  std::logic_error);
  std::vector<int> sums(2);
  w.run([&](communicator& comm) {
    std::vector<int> x{comm.rank() + 1};
    sg::comm::all_reduce(comm, x);
    sums[comm.rank()] = x[0];
  });
  CHECK(sums == std::vector<int>{3, 3});
}

TEST_CASE("threads::world times out a stuck collective instead of hanging", "[threads]") {
  // Ranks 0 and 1 wait in a barrier that rank 2 never calls; rank 2 is busy until one of them gives up.
  const world w(3, std::chrono::milliseconds(100));
  std::promise<void> gave_up;
  auto gave_up_future = gave_up.get_future();
  std::atomic<bool> once = false;
  const auto start = std::chrono::steady_clock::now();
  const auto message = error_of(w, [&](communicator& comm) {
    if (comm.rank() == 2) {
      gave_up_future.wait_for(std::chrono::seconds(5));
      return;
    }
    try {
      comm.barrier();
    } catch (...) {
      if (!once.exchange(true)) gave_up.set_value();
      throw;
    }
  });
  CHECK_THAT(message,
             ContainsSubstring("threads barrier, rank ") &&
                 ContainsSubstring("timed out after 100 ms: 2 of 3 ranks arrived (missing: rank 2)"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
}
