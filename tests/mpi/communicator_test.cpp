// Tests of shardgraph::mpi::communicator and world against hand-computed results.
// Runs with any number of processes, 1 to 8, under mpirun or alone (one rank):
//   mpirun --allow-run-as-root --oversubscribe -np 4 ./mpi_communicator_test
// Every rank runs every test case in the same order; checks that follow a collective use CHECK, not
// REQUIRE, so that a failure on one rank does not make it skip collectives the others enter.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <span>
#include <sstream>
#include <streambuf>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "test_process.hpp"
#include "shardgraph/core/half.hpp"
#include "shardgraph/core/half_types.hpp"
#include "shardgraph/mpi.hpp"

namespace {

using shardgraph::mpi::communicator;

using mpi_test::process;

// Each test case gets its own communicator, so that nothing one leaves behind reaches another.
using shardgraph::testing::contains;
using shardgraph::testing::error_of;

communicator fresh_communicator() { return communicator::duplicate(MPI_COMM_WORLD); }



template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if constexpr (sizeof(T) == 8) {
      if (std::bit_cast<std::uint64_t>(a[i]) != std::bit_cast<std::uint64_t>(b[i])) return false;
    } else {
      if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
    }
  }
  return true;
}

// Values of very different magnitudes, so that the order of summation shows in the last bits.
// Element 0 is -0.0 on every rank: a sum started from +0.0 would give +0.0.
template <class T>
T awkward_value(int rank, std::size_t i) {
  if (i == 0) return T(-0.0);
  if (i == 1) return rank == 0 ? T(1e16) : T(1);  // 1e16 + 1 rounds back to 1e16 in double
  const double fraction =
      static_cast<double>((rank * 7919 + static_cast<int>(i) * 104729) % 1000 + 1) / 1000.0;
  return T(std::ldexp(fraction, (rank * 13 + static_cast<int>(i) * 5) % 40 - 20));
}

}  // namespace

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

TEMPLATE_TEST_CASE("all_reduce sums every rank's data in place", "[mpi]", float, double, std::int32_t,
                   std::int64_t) {
  communicator comm = fresh_communicator();
  const int p = comm.size(), r = comm.rank();
  // 0 and 1 elements leave some ranks without a slice; 7 does not divide among 2, 3, 4 or 8 ranks.
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{64}}) {
    std::vector<TestType> data(n), expected(n);
    for (std::size_t i = 0; i < n; ++i) {
      const int mine = r * 3 + static_cast<int>(i);
      const int sum = 3 * (p * (p - 1) / 2) + p * static_cast<int>(i);  // over ranks q of q * 3 + i
      data[i] = static_cast<TestType>(mine);
      expected[i] = static_cast<TestType>(sum);
    }
    comm.all_reduce(std::span<TestType>(data));
    INFO("n = " << n);
    CHECK(data == expected);
  }
}

TEMPLATE_TEST_CASE("all_reduce adds in rank order and gives every rank the same bits", "[mpi]", float,
                   double) {
  communicator comm = fresh_communicator();
  const int p = comm.size(), r = comm.rank();
  const std::size_t n = 29;
  std::vector<TestType> data(n), expected(n);
  for (std::size_t i = 0; i < n; ++i) {
    data[i] = awkward_value<TestType>(r, i);
    expected[i] = awkward_value<TestType>(0, i);
    for (int q = 1; q < p; ++q) expected[i] += awkward_value<TestType>(q, i);
  }
  comm.all_reduce(std::span<TestType>(data));
  CHECK(same_bits(data, expected));
  CHECK(std::signbit(data[0]));

  std::vector<TestType> everyone(static_cast<std::size_t>(p) * n);
  comm.all_gather(std::span<const TestType>(data), std::span<TestType>(everyone));
  for (int q = 0; q < p; ++q) {
    const std::vector<TestType> theirs(everyone.begin() + q * static_cast<std::ptrdiff_t>(n),
                                       everyone.begin() + (q + 1) * static_cast<std::ptrdiff_t>(n));
    INFO("rank " << q);
    CHECK(same_bits(theirs, data));
  }
}

TEST_CASE("all_gather places rank r's data at offset r * n", "[mpi]") {
  communicator comm = fresh_communicator();
  const int p = comm.size(), r = comm.rank();

  SECTION("separate buffers") {
    const std::vector<std::int32_t> in{100 * r, 100 * r + 1, 100 * r + 2};
    std::vector<std::int32_t> out(3 * static_cast<std::size_t>(p), -1), expected;
    for (int q = 0; q < p; ++q) expected.insert(expected.end(), {100 * q, 100 * q + 1, 100 * q + 2});
    comm.all_gather(std::span<const std::int32_t>(in), std::span<std::int32_t>(out));
    CHECK(out == expected);
  }
  SECTION("in lies inside out, at this rank's offset") {
    std::vector<double> out(2 * static_cast<std::size_t>(p), -1.0), expected;
    out[2 * static_cast<std::size_t>(r)] = r + 0.5;
    out[2 * static_cast<std::size_t>(r) + 1] = r + 0.25;
    for (int q = 0; q < p; ++q) expected.insert(expected.end(), {q + 0.5, q + 0.25});
    comm.all_gather(std::span<const double>(out).subspan(2 * static_cast<std::size_t>(r), 2),
                    std::span<double>(out));
    CHECK(out == expected);
  }
  SECTION("bf16 bits and empty contributions") {
    const std::vector<std::uint16_t> in{shardgraph::float_to_bf16(static_cast<float>(r))};
    std::vector<std::uint16_t> out(static_cast<std::size_t>(p)), expected;
    for (int q = 0; q < p; ++q) expected.push_back(shardgraph::float_to_bf16(static_cast<float>(q)));
    comm.all_gather(std::span<const std::uint16_t>(in), std::span<std::uint16_t>(out));
    CHECK(out == expected);
    std::vector<float> nothing;
    comm.all_gather(std::span<const float>(nothing), std::span<float>(nothing));
  }
}

TEST_CASE("all_reduce sums bf16 and f16 values in rank order, each addition rounded", "[mpi]") {
  // Rank 0 holds 1, the others a half unit in the last place of 1 (bf16: 2^-8, f16: 2^-11): each
  // addition is a tie that rounds to even, so the sum stays 1 on every rank.
  communicator comm = fresh_communicator();
  const bool first = comm.rank() == 0;
  std::vector<shardgraph::bfloat16> b{shardgraph::bfloat16(first ? 1.0f : 0x1p-8f)};
  std::vector<shardgraph::float16> h{shardgraph::float16(first ? 1.0f : 0x1p-11f), shardgraph::float16(2.0f)};
  comm.all_reduce(std::span<shardgraph::bfloat16>(b));
  comm.all_reduce(std::span<shardgraph::float16>(h));
  CHECK(static_cast<float>(b[0]) == 1.0f);
  CHECK(static_cast<float>(h[0]) == 1.0f);
  CHECK(static_cast<float>(h[1]) == 2.0f * static_cast<float>(comm.size()));
}

TEST_CASE("reduce_scatter gives rank r the sum of every rank's chunk r", "[mpi]") {
  communicator comm = fresh_communicator();
  const int p = comm.size(), r = comm.rank();
  const std::size_t m = 3;

  SECTION("integers") {
    std::vector<std::int64_t> in(static_cast<std::size_t>(p) * m), out(m, -1), expected(m);
    for (int j = 0; j < p; ++j) {
      for (std::size_t e = 0; e < m; ++e)
        in[static_cast<std::size_t>(j) * m + e] = r + 10 * j + static_cast<int>(e);
    }
    for (std::size_t e = 0; e < m; ++e) expected[e] = p * (10 * r + static_cast<int>(e)) + p * (p - 1) / 2;
    comm.reduce_scatter(std::span<const std::int64_t>(in), std::span<std::int64_t>(out));
    CHECK(out == expected);
  }
  SECTION("in place: out is chunk rank() of in") {
    std::vector<double> buffer(static_cast<std::size_t>(p) * m);
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<double>(i) + 0.5 * r;
    const std::span<double> own = std::span<double>(buffer).subspan(static_cast<std::size_t>(r) * m, m);
    comm.reduce_scatter(std::span<const double>(buffer), own);
    for (std::size_t e = 0; e < m; ++e) {
      CHECK(own[e] == p * static_cast<double>(static_cast<std::size_t>(r) * m + e) + 0.25 * p * (p - 1));
    }
  }
  SECTION("doubles, added in rank order") {
    const auto value = [&](int rank, int chunk, std::size_t e) {
      return awkward_value<double>(rank, static_cast<std::size_t>(chunk) * m + e);
    };
    std::vector<double> in(static_cast<std::size_t>(p) * m), out(m), expected(m);
    for (int j = 0; j < p; ++j) {
      for (std::size_t e = 0; e < m; ++e) in[static_cast<std::size_t>(j) * m + e] = value(r, j, e);
    }
    for (std::size_t e = 0; e < m; ++e) {
      expected[e] = value(0, r, e);
      for (int q = 1; q < p; ++q) expected[e] += value(q, r, e);
    }
    comm.reduce_scatter(std::span<const double>(in), std::span<double>(out));
    CHECK(same_bits(out, expected));
  }
}

TEST_CASE("all_to_all sends chunk j of rank i to chunk i of rank j", "[mpi]") {
  communicator comm = fresh_communicator();
  const int p = comm.size(), r = comm.rank();
  const std::size_t m = 2;
  std::vector<std::int32_t> in(static_cast<std::size_t>(p) * m), out(in.size(), -1), expected(in.size());
  for (int c = 0; c < p; ++c) {
    for (std::size_t e = 0; e < m; ++e) {
      in[static_cast<std::size_t>(c) * m + e] = 100 * r + 10 * c + static_cast<int>(e);
      expected[static_cast<std::size_t>(c) * m + e] = 100 * c + 10 * r + static_cast<int>(e);
    }
  }
  SECTION("separate buffers") {
    comm.all_to_all(std::span<const std::int32_t>(in), std::span<std::int32_t>(out));
    CHECK(out == expected);
  }
  SECTION("in place") {
    comm.all_to_all(std::span<const std::int32_t>(in), std::span<std::int32_t>(in));
    CHECK(in == expected);
  }
}

TEST_CASE("broadcast copies root's data to every rank", "[mpi]") {
  communicator comm = fresh_communicator();
  const int p = comm.size(), r = comm.rank();
  for (int root = 0; root < p; ++root) {
    std::vector<double> data{r == root ? root + 0.5 : -1.0, r == root ? -root * 2.0 : -1.0};
    comm.broadcast(std::span<double>(data), root);
    INFO("root " << root);
    CHECK(data == std::vector<double>{root + 0.5, -root * 2.0});
  }
}

TEST_CASE("send and recv", "[mpi]") {
  communicator comm = fresh_communicator();
  const int p = comm.size(), r = comm.rank();
  if (p == 1) {
    SUCCEED("point to point needs two ranks");
    return;
  }
  const int next = (r + 1) % p, previous = (r + p - 1) % p;

  SECTION("a ring: everyone sends before receiving, which buffered sends allow") {
    std::vector<std::int64_t> token{r};
    std::int64_t total = 0;
    for (int step = 0; step < p - 1; ++step) {
      std::vector<std::int64_t> incoming(1);
      comm.send(token, next, step);
      comm.recv(incoming, previous, step);
      token[0] = incoming[0];
      total += incoming[0];
    }
    CHECK(total == std::int64_t{p} * (p - 1) / 2 - r);  // every other rank's
  }
  SECTION("large messages, every rank sending first") {
    // Far above any eager limit, so MPI must move the data while the sender waits in its own recv.
    const std::size_t n = std::size_t{1} << 20;
    std::vector<double> mine(n, static_cast<double>(r)), theirs(n, -1.0);
    comm.send(std::span<const double>(mine), next, 5);
    comm.recv(std::span<double>(theirs), previous, 5);
    CHECK(theirs.front() == static_cast<double>(previous));
    CHECK(theirs.back() == static_cast<double>(previous));
    comm.barrier();
  }
  SECTION("a pipeline: each stage adds its rank to every micro-batch and passes it on") {
    const int micro_batches = 6;
    std::vector<double> results;
    for (int m = 0; m < micro_batches; ++m) {
      std::vector<double> batch{static_cast<double>(m), static_cast<double>(m)};
      if (r > 0) comm.recv(batch, r - 1);
      batch[1] += r;
      if (r < p - 1)
        comm.send(batch, r + 1);
      else
        results.insert(results.end(), batch.begin(), batch.end());
    }
    if (r == p - 1) {
      const int stage_sum = p * (p - 1) / 2;
      for (int m = 0; m < micro_batches; ++m) {
        CHECK(results[2 * static_cast<std::size_t>(m)] == m);
        CHECK(results[2 * static_cast<std::size_t>(m) + 1] == m + stage_sum);
      }
    }
  }
  SECTION("messages match by (source, tag), in the order sent") {
    if (p < 3) return;
    if (r == 1) {
      for (int i = 0; i < 3; ++i) comm.send(std::vector<int>{10 + i}, 0, 7);
      comm.send(std::vector<int>{1}, 0, 1);
    } else if (r == 2) {
      comm.send(std::vector<int>{2}, 0, 1);
    } else if (r == 0) {
      std::vector<int> got, x(1);
      for (auto [source, tag] : {std::pair{2, 1}, {1, 1}, {1, 7}, {1, 7}, {1, 7}}) {
        comm.recv(x, source, tag);
        got.push_back(x[0]);
      }
      CHECK(got == std::vector<int>{2, 1, 10, 11, 12});
    }
    comm.barrier();
  }
  SECTION("bf16 bits and plain structs") {
    struct sample {
      std::int32_t id;
      float weight;
      std::uint8_t flags[3];
    };
    const std::array<std::uint16_t, 2> bits{shardgraph::float_to_bf16(static_cast<float>(r)), 0xffff};
    const std::array<sample, 1> record{sample{r, 0.5f * static_cast<float>(r), {1, 2, 3}}};
    std::array<std::uint16_t, 2> their_bits{};
    std::array<sample, 1> their_record{};
    comm.send(bits, next, 1);
    comm.send(record, next, 2);
    comm.recv(their_bits, previous, 1);
    comm.recv(their_record, previous, 2);
    CHECK(shardgraph::bf16_to_float(their_bits[0]) == static_cast<float>(previous));
    CHECK(their_bits[1] == 0xffff);
    CHECK(their_record[0].id == previous);
    CHECK(their_record[0].weight == 0.5f * static_cast<float>(previous));
    CHECK(their_record[0].flags[2] == 3);
  }
}

TEST_CASE("the communicator moves and sums small integers, and accepts vectors and arrays", "[mpi]") {
  communicator comm = fresh_communicator();
  const int p = comm.size(), r = comm.rank();
  std::vector<std::uint16_t> bits{static_cast<std::uint16_t>(0x3f80 + r), 0xffff};
  comm.all_reduce(bits);  // integer sums, wrapping as std::uint16_t does
  CHECK(bits[0] == static_cast<std::uint16_t>(0x3f80 * p + p * (p - 1) / 2));
  CHECK(bits[1] == static_cast<std::uint16_t>(0xffff * p));

  std::array<std::int8_t, 2> small{static_cast<std::int8_t>(r), static_cast<std::int8_t>(-r)};
  comm.all_reduce(small);
  CHECK(small[0] == p * (p - 1) / 2);
  CHECK(small[1] == -(p * (p - 1) / 2));

  std::vector<float> in{static_cast<float>(r)}, gathered(static_cast<std::size_t>(p));
  comm.all_gather(std::span<float>(in), gathered);  // a non-const span where a read-only one is expected
  std::vector<float> back(static_cast<std::size_t>(p));
  comm.all_to_all(gathered, back);
  CHECK(back == std::vector<float>(static_cast<std::size_t>(p), static_cast<float>(r)));
  std::array<float, 1> root_value{static_cast<float>(r)};
  comm.broadcast(root_value, p - 1);
  CHECK(root_value[0] == static_cast<float>(p - 1));
}

TEST_CASE("split forms the rows and columns of a 2 x N grid", "[mpi]") {
  communicator comm = fresh_communicator();
  const int p = comm.size(), r = comm.rank();
  const int rows = p % 2 == 0 ? 2 : 1, columns = p / rows;
  const int row = r / columns, column = r % columns;

  communicator row_comm = comm.split(row, column);
  communicator column_comm = comm.split(column, row);
  CHECK(row_comm.size() == columns);
  CHECK(row_comm.rank() == column);
  CHECK(column_comm.size() == rows);
  CHECK(column_comm.rank() == row);

  std::vector<std::int32_t> world_ranks(static_cast<std::size_t>(columns)), expected_row;
  for (int c = 0; c < columns; ++c) expected_row.push_back(row * columns + c);
  const std::vector<std::int32_t> me{r};
  row_comm.all_gather(std::span<const std::int32_t>(me), std::span<std::int32_t>(world_ranks));
  CHECK(world_ranks == expected_row);

  std::vector<std::int64_t> column_sum{r};
  column_comm.all_reduce(std::span<std::int64_t>(column_sum));
  CHECK(column_sum[0] == rows * (rows - 1) / 2 * columns + rows * column);

  communicator by_parity = comm.split(r % 2 == 0 ? -7 : 12, 0);  // any int is a color
  CHECK(by_parity.size() == (r % 2 == 0 ? (p + 1) / 2 : p / 2));
  CHECK(by_parity.rank() == r / 2);

  communicator reversed = comm.split(0, -r);
  CHECK(reversed.size() == p);
  CHECK(reversed.rank() == p - 1 - r);

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
    CHECK(contains(error_of([&] { comm.send(std::span(data), p, 0); }), "not a rank"));
    CHECK(contains(error_of([&] { comm.recv(std::span(data), -1, 0); }), "not a rank"));
    CHECK(contains(error_of([&] { comm.send(std::span(data), r, 0); }), "this rank itself"));
    if (p > 1) CHECK(contains(error_of([&] { comm.send(std::span(data), (r + 1) % p, -3); }), "tag -3"));
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
