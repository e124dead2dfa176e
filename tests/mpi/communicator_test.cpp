// Tests of shardgraph::mpi::communicator and world: the Communicator contract
// (tests/comm/communicator_contract.hpp) on this job's processes, then what only MPI does: the world
// and its ranks, colors of any sign, the agreement of arguments across ranks, MPI's error codes.
// Runs with any number of processes, 1 to 8, under mpirun or alone (one rank):
//   mpirun --allow-run-as-root --oversubscribe -np 4 ./mpi_communicator_test
// Every rank runs every test case in the same order; checks that follow a collective use CHECK, not
// REQUIRE, so that a failure on one rank does not make it skip collectives the others enter.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "comm/communicator_contract.hpp"
#include "shardgraph/mpi.hpp"
#include "test_process.hpp"

namespace {

using shardgraph::mpi::communicator;

using mpi_test::process;

using shardgraph::testing::contains;
using shardgraph::testing::error_of;

// Each test case gets its own communicator, so that nothing one leaves behind reaches another.
communicator fresh_communicator() { return communicator::duplicate(MPI_COMM_WORLD); }

// The contract's fixture: one rank per process, on a communicator made for the call; host memory.
struct mpi_fixture : communicator_contract::host_buffers {
  using communicator = shardgraph::mpi::communicator;
  static constexpr bool sums_in_rank_order = true, buffered_sends = true, matches_tags = true,
                        sums_16_bit_integers = true, all_to_all_in_place = true, host_memory = true;

  static std::vector<int> rank_counts() { return {process.world().size()}; }

  template <class Fn>
  static auto run(int p, Fn&& fn) {
    communicator comm = fresh_communicator();
    REQUIRE(comm.size() == p);
    std::map<int, decltype(fn(comm))> by_rank;
    by_rank.emplace(comm.rank(), fn(comm));
    return by_rank;
  }

  template <class Fn>
  static std::map<int, std::string> errors(int p, Fn&& fn) {
    communicator comm = fresh_communicator();
    REQUIRE(comm.size() == p);
    return {{comm.rank(), error_of([&] { fn(comm); })}};
  }
};

}  // namespace

using communicator_fixtures = std::tuple<mpi_fixture>;
#include "comm/communicator_contract_collectives.hpp"
#include "comm/communicator_contract_groups.hpp"

TEST_CASE("world and communicator report this process's rank and size", "[mpi]") {
  STATIC_REQUIRE(shardgraph::comm::Communicator<communicator>);
  int mpi_rank = -1, mpi_size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  const auto& world = process.world();
  CHECK(world.rank() == mpi_rank);
  CHECK(world.size() == mpi_size);
  communicator comm = world.world_communicator();
  CHECK(comm.rank() == mpi_rank);
  CHECK(comm.size() == mpi_size);
  comm.barrier();

  bool ran = false;
  world.run([&](auto& rank_comm) {
    ran = true;
    CHECK(rank_comm.rank() == mpi_rank);
    CHECK(rank_comm.size() == mpi_size);
    rank_comm.barrier();
  });
  CHECK(ran);
}

TEST_CASE("a second world leaves MPI to the one that started it", "[mpi]") {
  {
    shardgraph::mpi::world inner;
    CHECK(inner.size() == process.world().size());
    CHECK(inner.rank() == process.world().rank());
  }
  int finalized = 1;
  MPI_Finalized(&finalized);
  CHECK(finalized == 0);
  fresh_communicator().barrier();
}

TEST_CASE("split takes any int as a color; copies share the MPI communicator", "[mpi]") {
  communicator comm = fresh_communicator();
  const int p = comm.size(), r = comm.rank();

  communicator by_parity = comm.split(r % 2 == 0 ? -7 : 12, 0);  // any int is a color
  CHECK(by_parity.size() == (r % 2 == 0 ? (p + 1) / 2 : p / 2));
  CHECK(by_parity.rank() == r / 2);

  communicator row_comm = comm.split(0, r);
  communicator shared = row_comm;  // copies share the MPI communicator
  { communicator gone = std::move(row_comm); }
  shared.barrier();
  CHECK(contains(error_of([&] { row_comm.barrier(); }), "moved from"));  // NOLINT(bugprone-use-after-move)
}

TEST_CASE("wrong sizes throw shardgraph::error on every rank before any data moves", "[mpi]") {
  communicator comm = fresh_communicator();
  const int p = comm.size(), r = comm.rank();
  const auto n = static_cast<std::size_t>(p);

  SECTION("all_gather: out must hold size() * in.size()") {
    std::vector<double> in(2), out(2 * n + 1);
    const std::string message =
        error_of([&] { comm.all_gather(std::span<const double>(in), std::span<double>(out)); });
    INFO(message);
    CHECK(contains(message, "shardgraph: mpi::communicator::all_gather on rank " + std::to_string(r)));
    CHECK(contains(message, "size() * in.size()"));
  }
  SECTION("reduce_scatter: in must hold size() * out.size()") {
    std::vector<float> in(3 * n - 1), out(3);
    const std::string message =
        error_of([&] { comm.reduce_scatter(std::span<const float>(in), std::span<float>(out)); });
    INFO(message);
    CHECK(contains(message, "reduce_scatter"));
    CHECK(contains(message, "size() * out.size()"));
  }
  SECTION("all_to_all: equal sizes that split into size() chunks") {
    std::vector<std::int32_t> in(2 * n), out(2 * n + 2);
    std::string message =
        error_of([&] { comm.all_to_all(std::span<const std::int32_t>(in), std::span<std::int32_t>(out)); });
    INFO(message);
    CHECK(contains(message, "the same size"));
    if (p > 1) {
      std::vector<std::int32_t> odd(n + 1);
      message = error_of(
          [&] { comm.all_to_all(std::span<const std::int32_t>(odd), std::span<std::int32_t>(odd)); });
      INFO(message);
      CHECK(contains(message, "equal chunks"));
    }
  }
  SECTION("broadcast: root must be a rank") {
    std::vector<double> data(2);
    const std::string message = error_of([&] { comm.broadcast(std::span<double>(data), p); });
    INFO(message);
    CHECK(contains(message, "root " + std::to_string(p) + " is not a rank"));
  }
  SECTION("send and recv: peer and tag must be valid") {
    std::vector<double> data(1);
    CHECK(contains(error_of([&] { shardgraph::comm::send(comm, data, p, 0); }), "not a rank"));
    CHECK(contains(error_of([&] { shardgraph::comm::recv(comm, data, -1, 0); }), "not a rank"));
    CHECK(contains(error_of([&] { shardgraph::comm::send(comm, data, r, 0); }), "this rank itself"));
    if (p > 1)
      CHECK(contains(error_of([&] { shardgraph::comm::send(comm, data, (r + 1) % p, -3); }), "tag -3"));
  }
  SECTION("ranks that disagree on the count or the element type all throw") {
    if (p == 1) return;
    std::vector<double> uneven(static_cast<std::size_t>(r) + 1);
    std::string message = error_of([&] { comm.all_reduce(std::span<double>(uneven)); });
    INFO(message);
    CHECK(contains(message, "disagree on the element count: it ranges from 1 to " + std::to_string(p)));

    std::vector<float> as_float(4);
    std::vector<double> as_double(4);
    message = error_of([&] {
      if (r == 0)
        comm.all_reduce(std::span<float>(as_float));
      else
        comm.all_reduce(std::span<double>(as_double));
    });
    INFO(message);
    CHECK(contains(message, "disagree on the element type: it ranges from float to double"));
  }
  SECTION("a bad argument on one rank makes every rank throw, and the communicator stays usable") {
    if (p == 1) return;
    std::vector<double> in(1), out(r == 1 ? n + 1 : n);
    const std::string message =
        error_of([&] { comm.all_gather(std::span<const double>(in), std::span<double>(out)); });
    INFO(message);
    CHECK(contains(message, r == 1 ? "out holds" : "rank 1 passed invalid arguments"));
    std::vector<std::int32_t> one{1};
    comm.all_reduce(std::span<std::int32_t>(one));
    CHECK(one[0] == p);
  }
  SECTION("recv of a message of another size throws, consumes it and keeps the stream in step") {
    if (p == 1) return;
    if (r == 0) {
      const std::vector<double> three{1, 2, 3}, five{1, 2, 3, 4, 5}, good{7, 8};
      const std::vector<float> three_floats{1, 2, 3};
      comm.send(std::span(three), 1, 0);
      comm.send(std::span(five), 1, 0);
      comm.send(std::span(three_floats), 1, 0);
      comm.send(std::span(good), 1, 0);
    } else if (r == 1) {
      std::vector<double> four(4), two(2), one(1);
      std::string message = error_of([&] { comm.recv(std::span(four), 0, 0); });
      INFO(message);
      CHECK(contains(message, "holds 3 double elements but data holds 4"));
      message = error_of([&] { comm.recv(std::span(two), 0, 0); });
      CHECK(contains(message, "holds 5 double elements but data holds 2"));
      message = error_of([&] { comm.recv(std::span(one), 0, 0); });
      CHECK(contains(message, "12 bytes, not a whole number of double elements"));
      comm.recv(std::span(two), 0, 0);
      CHECK(two == std::vector<double>{7, 8});
    }
    comm.barrier();
  }
}

TEST_CASE("a failing MPI call becomes shardgraph::error naming the call", "[mpi]") {
  communicator comm = fresh_communicator();
  // The communicator returns MPI errors instead of aborting (MPI_ERRORS_RETURN): a negative count
  // comes back as an error code.
  const int code = MPI_Send(nullptr, -1, MPI_INT, 0, 0, comm.native_handle());
  REQUIRE(code != MPI_SUCCESS);
  const std::string message = error_of(
      [&] { shardgraph::mpi::check_mpi_call(code, "MPI_Send", "mpi::communicator::send on rank 0 of 1"); });
  INFO(message);
  CHECK(contains(message, "shardgraph: mpi::communicator::send on rank 0 of 1: MPI_Send failed: "));
  CHECK(contains(message, shardgraph::mpi::mpi_error_text(code)));
}
