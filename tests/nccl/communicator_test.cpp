// The nccl communicator: the Communicator contract (tests/comm/communicator_contract.hpp) on one
// rank and, where the machine has several GPUs, on min(device_count, 4) ranks; then what only NCCL
// does: a rank's GPU and stream, split's own streams, the device-memory checks, the worlds made from
// a unique id or the environment, and the failures that must throw on every rank instead of hanging.
// A GPU test: main() comes from tests/gpu_main.cpp, which skips it (exit code 77) without a GPU.
//
// Buffers are device memory: each rank uploads its input, calls the collective, and downloads the
// result. Catch2's assertions are not thread-safe: ranks only record what they saw, and the test
// thread checks it after world::run has joined them.
#include <shardgraph/comm/collectives.hpp>
#include <shardgraph/comm/communicator.hpp>
#include <shardgraph/cuda.hpp>
#include <shardgraph/nccl.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
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
using sg::cuda::device_buffer;
using sg::nccl::communicator;
using sg::nccl::world;

namespace {

using shardgraph::testing::ContainsSubstring;

constexpr std::chrono::milliseconds short_timeout = std::chrono::seconds(30);

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
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

template <class T>
device_buffer to_device(const std::vector<T>& host) {
  device_buffer buffer(host.size() * sizeof(T));
  buffer.upload(host);
  return buffer;
}

template <class T>
std::vector<T> to_host(const device_buffer& buffer) {
  std::vector<T> host(buffer.size_bytes() / sizeof(T));
  buffer.download(host);
  return host;
}

template <class T>
std::vector<T> iota_of(std::size_t n, T first, T step) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(first + static_cast<T>(i) * step);
  return v;
}

// The ranks of the multi-GPU tests: up to 4 GPUs; fewer than 2 means those tests do not apply.
int multi_gpu_ranks() { return std::min(sg::cuda::device_count(), 4); }

struct custom_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The contract's fixture: p ranks on p GPUs of a world made for the call (a world whose rank failed
// stays aborted); device memory.
struct nccl_fixture {
  using communicator = sg::nccl::communicator;
  static constexpr bool sums_in_rank_order = false, buffered_sends = false, matches_tags = false,
                        sums_16_bit_integers = false, all_to_all_in_place = false, host_memory = false;

  static std::vector<int> rank_counts() {
    const int p = multi_gpu_ranks();
    if (p < 2) return {1};
    return {1, p};
  }

  template <class Fn>
  static auto run(int p, Fn&& fn) {
    return communicator_contract::run_threads<communicator>(world::single_process(p, short_timeout), fn);
  }
  template <class Fn>
  static std::map<int, std::string> errors(int p, Fn&& fn) {
    return communicator_contract::errors_of_threads<communicator>(world::single_process(p, short_timeout),
                                                                  fn);
  }

  template <class T>
  static device_buffer make(const std::vector<T>& values) {
    return to_device(values);
  }
  template <class T>
  static std::span<T> view(device_buffer& buffer) {
    return buffer.view<T>();
  }
  template <class T>
  static std::vector<T> read(const device_buffer& buffer) {
    return to_host<T>(buffer);
  }
};

}  // namespace

using communicator_fixtures = std::tuple<nccl_fixture>;
#include "comm/communicator_contract_collectives.hpp"
#include "comm/communicator_contract_groups.hpp"

TEST_CASE("nccl: a rank knows its GPU and stream, and moves extreme values unchanged", "[nccl][gpu]") {
  const auto w = world::single_process(1);
  REQUIRE(w.size() == 1);
  REQUIRE(w.local_size() == 1);

  const auto doubles = iota_of<double>(19, 1e300, -1e299);
  std::vector<double> reduced_doubles, broadcast_doubles;
  int rank = -1, size = -1, device = -1;
  bool has_stream = false;
  w.run([&](communicator& comm) {
    rank = comm.rank();
    size = comm.size();
    device = comm.device();
    has_stream = comm.stream() != nullptr;
    auto d = to_device(doubles);
    comm.all_reduce(d.view<double>());
    reduced_doubles = to_host<double>(d);
    auto b = to_device(doubles);
    comm.broadcast(b.view<double>(), 0);
    broadcast_doubles = to_host<double>(b);
    comm.barrier();
    comm.barrier();
  });
  CHECK(rank == 0);
  CHECK(size == 1);
  CHECK(device == 0);
  CHECK(has_stream);
  CHECK(reduced_doubles == doubles);
  CHECK(broadcast_doubles == doubles);
}

TEST_CASE("nccl: split(0, 0) of one rank is a working one-rank communicator", "[nccl][gpu]") {
  const auto w = world::single_process(1);
  int sub_rank = -1, sub_size = -1, twice_rank = -1;
  std::vector<double> reduced;
  bool own_stream = false;
  w.run([&](communicator& comm) {
    communicator sub = comm.split(0, 0);
    sub_rank = sub.rank();
    sub_size = sub.size();
    own_stream = sub.stream() != comm.stream();
    auto x = to_device(std::vector<double>{1.5, -2.0, 3.25});
    sub.all_reduce(x.view<double>());
    reduced = to_host<double>(x);
    sub.barrier();
    communicator copy = sub;  // copies share the NCCL communicator
    copy.barrier();
    twice_rank = sub.split(7, -3).rank();
    comm.barrier();  // the parent still works
  });
  CHECK(sub_rank == 0);
  CHECK(sub_size == 1);
  CHECK(own_stream);
  CHECK(reduced == std::vector<double>{1.5, -2.0, 3.25});
  CHECK(twice_rank == 0);
}

TEST_CASE("nccl: a world runs again and again on the same communicators", "[nccl][gpu]") {
  const auto w = world::single_process(1);
  std::vector<float> seen;
  for (int round = 0; round < 3; ++round)
    w.run([&](communicator& comm) {
      auto x = to_device(std::vector<float>{static_cast<float>(round)});
      comm.all_reduce(x.view<float>());
      seen.push_back(to_host<float>(x)[0]);
    });
  CHECK(seen == std::vector<float>{0.0f, 1.0f, 2.0f});
}

TEST_CASE("nccl: bad arguments throw before NCCL runs and leave the communicator usable", "[nccl][gpu]") {
  const auto w = world::single_process(1);
  std::vector<std::string> messages;
  std::vector<float> after;
  w.run([&](communicator& comm) {
    auto four = to_device(std::vector<float>(4, 1.0f));
    device_buffer three(3 * sizeof(float));
    std::vector<float> host(4, 1.0f);

    messages.push_back(error_of([&] { comm.all_reduce(std::span<float>(host)); }));
    messages.push_back(
        error_of([&] { sg::comm::all_gather(comm, four.view<float>(), three.view<float>()); }));
    messages.push_back(
        error_of([&] { sg::comm::reduce_scatter(comm, four.view<float>(), three.view<float>()); }));
    messages.push_back(
        error_of([&] { sg::comm::all_to_all(comm, four.view<float>(), three.view<float>()); }));
    messages.push_back(error_of([&] {
      auto v = four.view<float>();
      sg::comm::all_to_all(comm, v, v);
    }));
    messages.push_back(error_of([&] { comm.broadcast(four.view<float>(), 1); }));
    messages.push_back(error_of([&] { sg::comm::send(comm, four.view<float>(), 0, 0); }));
    messages.push_back(error_of([&] { sg::comm::recv(comm, four.view<float>(), 1, 0); }));
    messages.push_back(error_of([&] { static_cast<void>(comm.split(-1, 0)); }));
    messages.push_back(
        error_of([&] { sg::comm::all_gather(comm, std::span<const float>(host), four.view<float>()); }));

    comm.all_reduce(four.view<float>());
    after = to_host<float>(four);
  });
  REQUIRE(messages.size() == 10);
  CHECK_THAT(messages[0],
             ContainsSubstring("shardgraph: nccl all_reduce, rank 0 of 1: data points to host memory, "
                               "but the nccl communicator moves device memory. Copy the data to "
                               "device memory first"));
  CHECK_THAT(messages[1],
             ContainsSubstring("shardgraph: nccl all_gather, rank 0 of 1: out holds 3 elements but "
                               "all_gather needs size() * in.size() = 1 * 4 = 4"));
  CHECK_THAT(messages[2], ContainsSubstring("nccl reduce_scatter, rank 0 of 1: in holds 4 elements but "
                                            "reduce_scatter needs size() * out.size() = 1 * 3 = 3"));
  CHECK_THAT(messages[3],
             ContainsSubstring("nccl all_to_all, rank 0 of 1: out holds 3 elements but in holds 4"));
  CHECK_THAT(messages[4],
             ContainsSubstring("nccl all_to_all, rank 0 of 1: in and out overlap. Pass separate buffers"));
  CHECK_THAT(messages[5],
             ContainsSubstring("nccl broadcast, rank 0 of 1: root 1 is not a rank of this group of 1"));
  CHECK_THAT(messages[6], ContainsSubstring("nccl send, rank 0 of 1: rank 0 names itself as the peer"));
  CHECK_THAT(messages[7],
             ContainsSubstring("nccl recv, rank 0 of 1: peer 1 is not a rank of this group of 1"));
  CHECK_THAT(messages[8], ContainsSubstring("nccl split, rank 0 of 1: color -1 is negative"));
  CHECK_THAT(messages[9], ContainsSubstring("nccl all_gather, rank 0 of 1: in points to host memory"));
  CHECK(after == std::vector<float>(4, 1.0f));
}

TEST_CASE("nccl: single_process and from_unique_id reject impossible worlds", "[nccl][gpu]") {
  const int devices = sg::cuda::device_count();
  CHECK_THAT(
      error_of([] { static_cast<void>(world::single_process(0)); }),
      ContainsSubstring("shardgraph: nccl::world::single_process: a world of 0 ranks cannot run anything"));
  CHECK_THAT(error_of([] { static_cast<void>(world::single_process(1, std::chrono::milliseconds(0))); }),
             ContainsSubstring("the timeout of 0 ms is not positive"));
  const auto too_many = error_of([&] { static_cast<void>(world::single_process(devices + 1)); });
  if (devices == 1)
    CHECK_THAT(too_many,
               ContainsSubstring("only 1 GPU is visible, and NCCL needs one GPU per rank, so 2 ranks "
                                 "cannot run here. Pass 1 rank"));
  else
    CHECK_THAT(too_many, ContainsSubstring(" GPUs but only " + std::to_string(devices) + " are visible"));
  const auto id = world::new_unique_id();
  CHECK_THAT(error_of([&] { static_cast<void>(world::from_unique_id(id, 2, 2)); }),
             ContainsSubstring("nccl::world::from_unique_id: rank 2 is not in [0, 2)"));
}

TEST_CASE("nccl: a one-rank world from a unique id works like single_process(1)", "[nccl][gpu]") {
  const auto w = world::from_unique_id(world::new_unique_id(), 0, 1);
  CHECK(w.size() == 1);
  std::vector<std::int64_t> reduced;
  w.run([&](communicator& comm) {
    auto x = to_device(std::vector<std::int64_t>{-7, 8});
    comm.all_reduce(x.view<std::int64_t>());
    comm.barrier();
    reduced = to_host<std::int64_t>(x);
  });
  CHECK(reduced == std::vector<std::int64_t>{-7, 8});
}

TEST_CASE("nccl: an exception on a rank comes out of run, and the world stays aborted", "[nccl][gpu]") {
  const auto w = world::single_process(1, short_timeout);
  CHECK_THROWS_AS(w.run([](communicator& comm) {
    comm.barrier();
    throw custom_failure("rank failed on purpose");
  }),
                  custom_failure);
  CHECK_THAT(
      error_of([&] { w.run([](communicator&) {}); }),
      ContainsSubstring("shardgraph: nccl::world::run: this world was aborted after rank 0 failed: rank "
                        "failed on purpose. Fix the first failure, then make a new nccl::world"));
}

TEST_CASE("nccl: a world whose other ranks never come ends in a timeout", "[nccl][gpu]") {
  const auto start = std::chrono::steady_clock::now();
  const auto message = error_of([] {
    static_cast<void>(world::from_unique_id(world::new_unique_id(), 0, 2, std::chrono::seconds(2)));
  });
  CHECK_THAT(message,
             ContainsSubstring("shardgraph: nccl::world::from_unique_id: the NCCL communicator was not "
                               "ready within 2000 ms. Check that every rank calls from_unique_id"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
}

TEST_CASE("nccl: each rank of several runs on its own GPU", "[nccl][gpu]") {
  const int p = multi_gpu_ranks();
  if (p < 2) {
    WARN("only " << p << " GPU visible: the multi-GPU ranks are not exercised here");
    return;
  }
  const auto w = world::single_process(p, short_timeout);
  std::vector<int> ranks(static_cast<std::size_t>(p), -1), devices(static_cast<std::size_t>(p), -1);
  w.run([&](communicator& comm) {
    ranks[static_cast<std::size_t>(comm.rank())] = comm.rank();
    devices[static_cast<std::size_t>(comm.rank())] = comm.device();
  });
  for (int r = 0; r < p; ++r) {
    CHECK(ranks[static_cast<std::size_t>(r)] == r);
    CHECK(devices[static_cast<std::size_t>(r)] == r);
  }
}

TEST_CASE("nccl: a failing rank makes the others throw instead of hanging", "[nccl][gpu]") {
  const int p = multi_gpu_ranks();
  if (p < 2) {
    WARN("only " << p << " GPU visible: failures across ranks are not exercised here");
    return;
  }
  SECTION("a rank throws before a collective") {
    const auto w = world::single_process(p, short_timeout);
    std::vector<std::string> messages(static_cast<std::size_t>(p));
    CHECK_THROWS_AS(w.run([&](communicator& comm) {
      if (comm.rank() == 0) throw custom_failure("rank 0 gave up");
      auto x = to_device(std::vector<float>(16, 1.0f));
      try {
        comm.all_reduce(x.view<float>());
      } catch (const sg::error& e) {
        messages[static_cast<std::size_t>(comm.rank())] = e.what();
        throw;
      }
    }),
                    custom_failure);
    for (int r = 1; r < p; ++r)
      CHECK_THAT(messages[static_cast<std::size_t>(r)],
                 ContainsSubstring("nccl all_reduce, rank " + std::to_string(r) + " of " + std::to_string(p) +
                                   ": aborted because rank 0 failed: rank 0 gave up"));
  }
  SECTION("the other ranks return without joining a collective") {
    const auto w = world::single_process(p, short_timeout);
    const auto messages = errors_per_rank(w, [](communicator& comm) {
      if (comm.rank() != 0) return;
      auto x = to_device(std::vector<float>(16, 1.0f));
      comm.all_reduce(x.view<float>());
    });
    CHECK_THAT(messages[0], ContainsSubstring("nccl all_reduce, rank 0 of " + std::to_string(p) +
                                              ": every other rank has returned from its function"));
  }
  SECTION("a rank on another GPU's memory is refused") {
    const auto w = world::single_process(p, short_timeout);
    std::string message;
    w.run([&](communicator& comm) {
      if (comm.rank() != 0) return;
      const sg::cuda::device_guard on(1);
      device_buffer elsewhere(4 * sizeof(float));
      message = error_of([&] { comm.broadcast(elsewhere.view<float>(), 0); });
    });
    CHECK_THAT(message, ContainsSubstring("nccl broadcast, rank 0 of " + std::to_string(p) +
                                          ": data is device memory of GPU 1 but this rank runs on GPU 0"));
  }
}

TEST_CASE("nccl: world_from_environment makes the launched rank's world", "[nccl][gpu]") {
  // The process's own environment: one process, or the rank tools/shardgraph-run started.
  const sg::launch::placement p = sg::launch::detect_placement();
  world w = sg::nccl::world_from_environment();
  CHECK(w.size() == p.world_size);
  std::vector<std::int64_t> reduced;
  w.run([&](communicator& comm) {
    auto x = to_device(std::vector<std::int64_t>{1, 2});
    comm.all_reduce(x.view<std::int64_t>());
    reduced = to_host<std::int64_t>(x);
  });
  CHECK(reduced == std::vector<std::int64_t>{p.world_size, 2 * p.world_size});

  // A node asked to run more ranks than it has GPUs stops before NCCL, naming the rank.
  const int devices = sg::cuda::device_count();
  const std::string rank = std::to_string(devices);
  const sg::launch::environment crowded = [&](std::string_view name) -> std::optional<std::string> {
    if (name == "RANK" || name == "LOCAL_RANK") return rank;
    if (name == "WORLD_SIZE" || name == "LOCAL_WORLD_SIZE") return std::to_string(devices + 1);
    return std::nullopt;
  };
  CHECK_THAT(
      error_of([&] { static_cast<void>(sg::nccl::world_from_environment(world::default_timeout, crowded)); }),
      ContainsSubstring("local rank " + rank + " needs a GPU of its own, and this node has " +
                        std::to_string(devices) + " to use"));
}
