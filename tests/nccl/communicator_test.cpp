// The nccl communicator: every collective on one rank (each one the identity there) and, where the
// machine has several GPUs, on min(device_count, 4) ranks against hand-computed results; split;
// the argument checks; and the failures that must throw on every rank instead of hanging.
// A GPU test: main() comes from tests/gpu_main.cpp, which skips it (exit code 77) without a GPU.
//
// Buffers are device memory: each rank uploads its input, calls the collective, and downloads the
// result. Catch2's assertions are not thread-safe: ranks only record what they saw, and the test
// thread checks it after world::run has joined them.
#include <shardgraph/comm/communicator.hpp>
#include <shardgraph/cuda.hpp>
#include <shardgraph/nccl.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.hpp"

namespace sg = shardgraph;
using sg::cuda::device_buffer;
using sg::nccl::communicator;
using sg::nccl::world;

static_assert(sg::comm::Communicator<communicator>);

namespace {

#if defined(SHARDGRAPH_CATCH3)
using Catch::Matchers::ContainsSubstring;
#else
auto ContainsSubstring(const std::string& s) { return Catch::Matchers::Contains(s); }
#endif

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
  std::vector<std::string> messages(static_cast<std::size_t>(w.size()));
  try {
    w.run([&](communicator& comm) {
      try {
        fn(comm);
      } catch (const sg::error& e) {
        messages[static_cast<std::size_t>(comm.rank())] = e.what();
        throw;
      }
    });
  } catch (const std::exception&) {
  }
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

}  // namespace

// ---- one rank --------------------------------------------------------------------------------------

TEST_CASE("nccl: on one rank every collective is the identity", "[nccl][gpu]") {
  const auto w = world::single_process(1);
  REQUIRE(w.size() == 1);
  REQUIRE(w.local_size() == 1);

  const auto floats = iota_of<float>(37, -4.25f, 0.5f);
  const auto doubles = iota_of<double>(19, 1e300, -1e299);
  const auto int32s = iota_of<std::int32_t>(11, -5, 1000);
  const auto int64s = iota_of<std::int64_t>(5, std::int64_t{1} << 50, 3);
  const auto bf16s = iota_of<std::uint16_t>(64, 0x7f70, 1);  // bf16 bit patterns around inf and NaN

  std::vector<float> reduced_floats, gathered_floats, gathered_in_place, scattered_floats, exchanged_floats;
  std::vector<double> reduced_doubles, broadcast_doubles;
  std::vector<std::int32_t> reduced_int32s, scattered_int32s_in_place;
  std::vector<std::int64_t> reduced_int64s, exchanged_int64s;
  std::vector<std::uint16_t> gathered_bf16s, exchanged_bf16s, broadcast_bf16s;
  int rank = -1, size = -1, device = -1;
  bool has_stream = false;

  w.run([&](communicator& comm) {
    rank = comm.rank();
    size = comm.size();
    device = comm.device();
    has_stream = comm.stream() != nullptr;

    auto f = to_device(floats);
    comm.all_reduce(f.view<float>());
    reduced_floats = to_host<float>(f);
    auto d = to_device(doubles);
    comm.all_reduce(d.view<double>());
    reduced_doubles = to_host<double>(d);
    auto i32 = to_device(int32s);
    comm.all_reduce(i32.view<std::int32_t>());
    reduced_int32s = to_host<std::int32_t>(i32);
    auto i64 = to_device(int64s);
    comm.all_reduce(i64.view<std::int64_t>());
    reduced_int64s = to_host<std::int64_t>(i64);

    const auto in = to_device(floats);
    device_buffer out(in.size_bytes());
    comm.all_gather(in.view<float>(), out.view<float>());
    gathered_floats = to_host<float>(out);
    auto whole = to_device(floats);
    comm.all_gather(whole.view<float>(), whole.view<float>());  // in place: in = out.subspan(0, n)
    gathered_in_place = to_host<float>(whole);
    const auto bits = to_device(bf16s);
    device_buffer bits_out(bits.size_bytes());
    comm.all_gather(bits.view<std::uint16_t>(), bits_out.view<std::uint16_t>());
    gathered_bf16s = to_host<std::uint16_t>(bits_out);

    device_buffer scattered(in.size_bytes());
    comm.reduce_scatter(in.view<float>(), scattered.view<float>());
    scattered_floats = to_host<float>(scattered);
    auto in_place = to_device(int32s);
    comm.reduce_scatter(in_place.view<std::int32_t>(), in_place.view<std::int32_t>());
    scattered_int32s_in_place = to_host<std::int32_t>(in_place);

    device_buffer exchanged(in.size_bytes());
    comm.all_to_all(in.view<float>(), exchanged.view<float>());  // one ncclSend and ncclRecv to itself
    exchanged_floats = to_host<float>(exchanged);
    const auto big = to_device(int64s);
    device_buffer big_out(big.size_bytes());
    comm.all_to_all(big.view<std::int64_t>(), big_out.view<std::int64_t>());
    exchanged_int64s = to_host<std::int64_t>(big_out);
    device_buffer bits_exchanged(bits.size_bytes());
    comm.all_to_all(bits.view<std::uint16_t>(), bits_exchanged.view<std::uint16_t>());
    exchanged_bf16s = to_host<std::uint16_t>(bits_exchanged);

    auto b = to_device(doubles);
    comm.broadcast(b.view<double>(), 0);
    broadcast_doubles = to_host<double>(b);
    auto bb = to_device(bf16s);
    comm.broadcast(bb.view<std::uint16_t>(), 0);
    broadcast_bf16s = to_host<std::uint16_t>(bb);

    comm.barrier();
    comm.barrier();

    // Empty buffers are valid and move nothing.
    device_buffer nothing;
    comm.all_reduce(nothing.view<float>());
    comm.all_gather(nothing.view<const float>(), nothing.view<float>());
    comm.reduce_scatter(nothing.view<const float>(), nothing.view<float>());
    comm.all_to_all(nothing.view<const float>(), nothing.view<float>());
    comm.broadcast(nothing.view<float>(), 0);

    // send/recv need a peer other than the rank itself, which one rank does not have: the
    // multi-GPU test below covers them, and the argument test checks that self-sends are refused.
  });

  CHECK(rank == 0);
  CHECK(size == 1);
  CHECK(device == 0);
  CHECK(has_stream);
  CHECK(reduced_floats == floats);
  CHECK(reduced_doubles == doubles);
  CHECK(reduced_int32s == int32s);
  CHECK(reduced_int64s == int64s);
  CHECK(gathered_floats == floats);
  CHECK(gathered_in_place == floats);
  CHECK(gathered_bf16s == bf16s);
  CHECK(scattered_floats == floats);
  CHECK(scattered_int32s_in_place == int32s);
  CHECK(exchanged_floats == floats);
  CHECK(exchanged_int64s == int64s);
  CHECK(exchanged_bf16s == bf16s);
  CHECK(broadcast_doubles == doubles);
  CHECK(broadcast_bf16s == bf16s);
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
    messages.push_back(error_of([&] { comm.all_gather(four.view<float>(), three.view<float>()); }));
    messages.push_back(error_of([&] { comm.reduce_scatter(four.view<float>(), three.view<float>()); }));
    messages.push_back(error_of([&] { comm.all_to_all(four.view<float>(), three.view<float>()); }));
    messages.push_back(error_of([&] {
      auto v = four.view<float>();
      comm.all_to_all(v, v);
    }));
    messages.push_back(error_of([&] { comm.broadcast(four.view<float>(), 1); }));
    messages.push_back(error_of([&] { comm.send(four.view<float>(), 0, 0); }));
    messages.push_back(error_of([&] { comm.recv(four.view<float>(), 1, 0); }));
    messages.push_back(error_of([&] { static_cast<void>(comm.split(-1, 0)); }));
    messages.push_back(error_of([&] { comm.all_gather(std::span<const float>(host), four.view<float>()); }));

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

// ---- several GPUs ----------------------------------------------------------------------------------

TEST_CASE("nccl: collectives on several GPUs give the hand-computed results", "[nccl][gpu]") {
  const int p = multi_gpu_ranks();
  if (p < 2) {
    WARN("only " << p << " GPU visible: the multi-GPU collectives are not exercised here");
    return;
  }
  const auto w = world::single_process(p, short_timeout);
  const auto P = static_cast<std::size_t>(p);
  constexpr std::size_t n = 5;
  std::vector<std::vector<double>> reduced(P), gathered(P), gathered_in_place(P), scattered(P),
      scattered_in_place(P), exchanged(P), broadcast(P), received(P);
  std::vector<std::vector<std::int64_t>> reduced_int64s(P);
  std::vector<std::vector<std::uint64_t>> float_bits(P);
  std::vector<int> ranks(P, -1), devices(P, -1);

  w.run([&](communicator& comm) {
    const int r = comm.rank();
    const auto R = static_cast<std::size_t>(r);
    ranks[R] = r;
    devices[R] = comm.device();

    auto x = to_device(iota_of<double>(n, r, 0.5));  // x[i] = r + i/2
    comm.all_reduce(x.view<double>());
    reduced[R] = to_host<double>(x);

    auto big = to_device(std::vector<std::int64_t>{(std::int64_t{1} << 40) * r, -r});
    comm.all_reduce(big.view<std::int64_t>());
    reduced_int64s[R] = to_host<std::int64_t>(big);

    // Irregular floats: NCCL's order of summation is its own, but every rank gets the same bits.
    std::vector<float> irregular(257);
    for (std::size_t i = 0; i < irregular.size(); ++i)
      irregular[i] = 1.0f / static_cast<float>(3 + i + 7 * R) + static_cast<float>(i) * 1e-3f;
    auto bits = to_device(irregular);
    comm.all_reduce(bits.view<float>());
    for (float v : to_host<float>(bits)) float_bits[R].push_back(std::bit_cast<std::uint32_t>(v));

    const auto mine = to_device(iota_of<double>(n, 10.0 * r, 1.0));  // (n): 10r + i
    device_buffer all(P * n * sizeof(double));
    comm.all_gather(mine.view<double>(), all.view<double>());
    gathered[R] = to_host<double>(all);

    std::vector<double> staged(P * n, -1.0);
    std::copy_n(iota_of<double>(n, 10.0 * r, 1.0).begin(), n,
                staged.begin() + static_cast<std::ptrdiff_t>(R * n));
    auto whole = to_device(staged);
    auto whole_view = whole.view<double>();
    comm.all_gather(whole_view.subspan(R * n, n), whole_view);
    gathered_in_place[R] = to_host<double>(whole);

    const auto contributions = to_device(iota_of<double>(P * n, 100.0 * r, 1.0));  // (p * n): 100r + j
    device_buffer chunk(n * sizeof(double));
    comm.reduce_scatter(contributions.view<double>(), chunk.view<double>());
    scattered[R] = to_host<double>(chunk);
    auto in_place = to_device(iota_of<double>(P * n, 100.0 * r, 1.0));
    auto in_place_view = in_place.view<double>();
    comm.reduce_scatter(in_place_view, in_place_view.subspan(R * n, n));
    scattered_in_place[R] = to_host<double>(in_place);

    std::vector<double> outgoing(P * n);  // chunk j, element k: 1000r + 10j + k
    for (std::size_t j = 0; j < P; ++j)
      for (std::size_t k = 0; k < n; ++k)
        outgoing[j * n + k] = 1000.0 * r + 10.0 * static_cast<double>(j) + static_cast<double>(k);
    const auto send_buffer = to_device(outgoing);
    device_buffer receive_buffer(send_buffer.size_bytes());
    comm.all_to_all(send_buffer.view<double>(), receive_buffer.view<double>());
    exchanged[R] = to_host<double>(receive_buffer);

    auto shared = to_device(std::vector<double>(n, r == p - 1 ? 42.0 : -1.0));
    comm.broadcast(shared.view<double>(), p - 1);
    broadcast[R] = to_host<double>(shared);

    // A ring: r sends to r + 1 and receives from r - 1. Rank 0 sends first, the others receive
    // first, since a send returns only once its recv has taken the data.
    const auto token = to_device(std::vector<double>(n, 7.0 * r));
    device_buffer inbox(n * sizeof(double));
    const int next = (r + 1) % p, previous = (r + p - 1) % p;
    if (r == 0) {
      comm.send(token.view<double>(), next, 3);
      comm.recv(inbox.view<double>(), previous, 3);
    } else {
      comm.recv(inbox.view<double>(), previous, 3);
      comm.send(token.view<double>(), next, 3);
    }
    received[R] = to_host<double>(inbox);

    comm.barrier();
  });

  const double rank_sum = static_cast<double>(p * (p - 1) / 2);
  for (std::size_t r = 0; r < P; ++r) {
    INFO("rank " << r);
    CHECK(ranks[r] == static_cast<int>(r));
    CHECK(devices[r] == static_cast<int>(r));
    std::vector<double> expected_sum(n);
    for (std::size_t i = 0; i < n; ++i)
      expected_sum[i] = rank_sum + static_cast<double>(p) * 0.5 * static_cast<double>(i);
    CHECK(reduced[r] == expected_sum);
    CHECK(reduced_int64s[r] ==
          std::vector<std::int64_t>{(std::int64_t{1} << 40) * p * (p - 1) / 2, -p * (p - 1) / 2});
    CHECK(float_bits[r] == float_bits[0]);

    std::vector<double> expected_gather;
    for (std::size_t q = 0; q < P; ++q)
      for (std::size_t i = 0; i < n; ++i)
        expected_gather.push_back(10.0 * static_cast<double>(q) + static_cast<double>(i));
    CHECK(gathered[r] == expected_gather);
    CHECK(gathered_in_place[r] == expected_gather);

    std::vector<double> expected_chunk(n);
    for (std::size_t i = 0; i < n; ++i)
      expected_chunk[i] = 100.0 * rank_sum + static_cast<double>(P * (r * n + i));
    CHECK(scattered[r] == expected_chunk);
    const auto& whole = scattered_in_place[r];
    CHECK(std::vector<double>(whole.begin() + static_cast<std::ptrdiff_t>(r * n),
                              whole.begin() + static_cast<std::ptrdiff_t>(r * n + n)) == expected_chunk);

    std::vector<double> expected_exchange(P * n);  // chunk i came from rank i: 1000i + 10r + k
    for (std::size_t i = 0; i < P; ++i)
      for (std::size_t k = 0; k < n; ++k)
        expected_exchange[i * n + k] =
            1000.0 * static_cast<double>(i) + 10.0 * static_cast<double>(r) + static_cast<double>(k);
    CHECK(exchanged[r] == expected_exchange);

    CHECK(broadcast[r] == std::vector<double>(n, 42.0));
    CHECK(received[r] == std::vector<double>(n, 7.0 * static_cast<double>((r + P - 1) % P)));
  }
}

TEST_CASE("nccl: split on several GPUs groups ranks by color and orders them by key", "[nccl][gpu]") {
  const int p = multi_gpu_ranks();
  if (p < 2) {
    WARN("only " << p << " GPU visible: split of several ranks is not exercised here");
    return;
  }
  const auto w = world::single_process(p, short_timeout);
  const auto P = static_cast<std::size_t>(p);
  std::vector<int> sub_ranks(P, -1), sub_sizes(P, -1);
  std::vector<double> sums(P, -1.0);
  w.run([&](communicator& comm) {
    const int r = comm.rank();
    communicator sub = comm.split(r % 2, -r);  // by parity, in reverse rank order
    sub_ranks[static_cast<std::size_t>(r)] = sub.rank();
    sub_sizes[static_cast<std::size_t>(r)] = sub.size();
    auto x = to_device(std::vector<double>{static_cast<double>(r)});
    sub.all_reduce(x.view<double>());
    sums[static_cast<std::size_t>(r)] = to_host<double>(x)[0];
    comm.barrier();
  });
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r);
    int size = 0, higher = 0;
    double sum = 0;
    for (int q = r % 2; q < p; q += 2) {
      ++size;
      sum += q;
      if (q > r) ++higher;
    }
    CHECK(sub_sizes[static_cast<std::size_t>(r)] == size);
    CHECK(sub_ranks[static_cast<std::size_t>(r)] == higher);
    CHECK(sums[static_cast<std::size_t>(r)] == sum);
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
