// The threads communicator: every collective against hand-computed results on 1, 2, 3, 4 and 8
// ranks, sub-groups of a mesh running concurrently, point-to-point patterns, and the failures
// (size mismatches, a throwing rank, a timeout) that must throw on every rank instead of hanging.
//
// Catch2's assertions are not thread-safe: ranks only record what they saw, and the test thread
// checks it after world::run has joined them.
#include <shardgraph/comm/communicator.hpp>
#include <shardgraph/threads.hpp>

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <future>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.hpp"

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
  } catch (const sg::error&) {
  }
  return messages;
}

template <class T>
std::vector<T> iota_of(std::size_t n, T first, T step) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(first + static_cast<T>(i) * step);
  return v;
}

// The bit patterns of doubles, so that a comparison tells identical bits from equal values.
std::vector<std::uint64_t> bits_of(std::span<const double> values) {
  std::vector<std::uint64_t> bits;
  for (double v : values) bits.push_back(std::bit_cast<std::uint64_t>(v));
  return bits;
}

struct custom_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

TEST_CASE("threads::communicator satisfies the Communicator concept", "[threads]") {
  STATIC_REQUIRE(sg::comm::Communicator<communicator>);
  STATIC_REQUIRE(std::is_nothrow_move_constructible_v<communicator>);
}

TEST_CASE("threads::world rejects a world without ranks", "[threads]") {
  CHECK_THROWS_AS(world(0), sg::error);
  CHECK_THROWS_WITH(world(2, std::chrono::milliseconds(0)), ContainsSubstring("timeout"));
}

TEMPLATE_TEST_CASE("threads::communicator collectives give hand-computed results", "[threads]", float, double,
                   std::int64_t) {
  using T = TestType;
  const int p = GENERATE(1, 2, 3, 4, 8);
  const auto np = static_cast<std::size_t>(p);
  const std::size_t n = 5;  // elements per rank (per chunk where a collective splits)
  const world w(p);
  CAPTURE(p);

  SECTION("all_reduce: data[i] on rank r = 10 (r + 1) + i sums to 5 p (p + 1) + p i") {
    std::vector<std::vector<T>> seen(np);
    w.run([&](communicator& comm) {
      auto data = iota_of<T>(n, static_cast<T>(10 * (comm.rank() + 1)), T(1));
      comm.all_reduce(std::span<T>(data));
      seen[static_cast<std::size_t>(comm.rank())] = data;
    });
    for (const auto& data : seen)
      for (std::size_t i = 0; i < n; ++i)
        CHECK(data[i] == static_cast<T>(5 * p * (p + 1) + p * static_cast<int>(i)));
  }

  SECTION("all_gather: out holds rank k's in = {100 k + i} at offset k n") {
    std::vector<std::vector<T>> seen(np);
    w.run([&](communicator& comm) {
      const auto in = iota_of<T>(n, static_cast<T>(100 * comm.rank()), T(1));
      std::vector<T> out(np * n, T(-1));
      comm.all_gather(std::span<const T>(in), std::span<T>(out));
      seen[static_cast<std::size_t>(comm.rank())] = out;
    });
    for (const auto& out : seen)
      for (std::size_t k = 0; k < np; ++k)
        for (std::size_t i = 0; i < n; ++i) CHECK(out[k * n + i] == static_cast<T>(100 * k + i));
  }

  SECTION("reduce_scatter: rank r gets sum over q of (q + r n + i) = p (p - 1) / 2 + p (r n + i)") {
    std::vector<std::vector<T>> seen(np);
    w.run([&](communicator& comm) {
      const auto in = iota_of<T>(np * n, static_cast<T>(comm.rank()), T(1));
      std::vector<T> out(n, T(-1));
      comm.reduce_scatter(std::span<const T>(in), std::span<T>(out));
      seen[static_cast<std::size_t>(comm.rank())] = out;
    });
    for (std::size_t r = 0; r < np; ++r)
      for (std::size_t i = 0; i < n; ++i)
        CHECK(seen[r][i] == static_cast<T>(p * (p - 1) / 2 + p * static_cast<int>(r * n + i)));
  }

  SECTION("all_to_all: chunk j of rank i's in, {100 i + 10 j + e}, lands in chunk i of rank j's out") {
    std::vector<std::vector<T>> seen(np);
    w.run([&](communicator& comm) {
      std::vector<T> in(np * n), out(np * n, T(-1));
      for (std::size_t j = 0; j < np; ++j)
        for (std::size_t e = 0; e < n; ++e) in[j * n + e] = static_cast<T>(100 * comm.rank() + 10 * j + e);
      comm.all_to_all(std::span<const T>(in), std::span<T>(out));
      seen[static_cast<std::size_t>(comm.rank())] = out;
    });
    for (std::size_t j = 0; j < np; ++j)
      for (std::size_t i = 0; i < np; ++i)
        for (std::size_t e = 0; e < n; ++e) CHECK(seen[j][i * n + e] == static_cast<T>(100 * i + 10 * j + e));
  }

  SECTION("broadcast: every rank gets the root's {7, 10, 13, ...}") {
    const int root = GENERATE_COPY(0, p - 1);
    std::vector<std::vector<T>> seen(np);
    w.run([&](communicator& comm) {
      auto data = comm.rank() == root ? iota_of<T>(n, T(7), T(3)) : std::vector<T>(n, T(-1));
      comm.broadcast(std::span<T>(data), root);
      seen[static_cast<std::size_t>(comm.rank())] = data;
    });
    for (const auto& data : seen) CHECK(data == iota_of<T>(n, T(7), T(3)));
  }

  SECTION("barrier: no rank leaves before every rank has arrived") {
    std::atomic<int> arrived = 0;
    std::vector<int> seen(np);
    w.run([&](communicator& comm) {
      ++arrived;
      comm.barrier();
      seen[static_cast<std::size_t>(comm.rank())] = arrived.load();
    });
    for (int count : seen) CHECK(count == p);
  }

  SECTION("empty buffers are fine") {
    w.run([&](communicator& comm) {
      std::vector<T> none;
      comm.all_reduce(std::span<T>(none));
      comm.all_gather(std::span<const T>(none), std::span<T>(none));
      comm.reduce_scatter(std::span<const T>(none), std::span<T>(none));
      comm.all_to_all(std::span<const T>(none), std::span<T>(none));
      comm.broadcast(std::span<T>(none), 0);
    });
  }
}

TEST_CASE("threads::communicator sums in rank order, so every rank and every run gets the same bits",
          "[threads]") {
  const int p = 8;
  const std::size_t n = 1000;
  auto value = [](int rank, std::size_t i) {
    return 0.1 * (rank + 1) + 1e-3 / static_cast<double>(i + 1) - 0.37 * rank * rank;
  };
  std::vector<double> expected(n);  // the sum in rank order 0, 1, ..., p-1
  for (std::size_t i = 0; i < n; ++i) {
    expected[i] = value(0, i);
    for (int r = 1; r < p; ++r) expected[i] += value(r, i);
  }
  std::vector<double> reverse_order(n);  // another order gives other bits: the order is what is tested
  for (std::size_t i = 0; i < n; ++i) {
    reverse_order[i] = value(p - 1, i);
    for (int r = p - 2; r >= 0; --r) reverse_order[i] += value(r, i);
  }
  REQUIRE(bits_of(reverse_order) != bits_of(expected));
  const world w(p);
  for (int run = 0; run < 2; ++run) {
    std::vector<std::vector<double>> reduced(p), scattered(p);
    w.run([&](communicator& comm) {
      std::vector<double> data(n);
      for (std::size_t i = 0; i < n; ++i) data[i] = value(comm.rank(), i);
      std::vector<double> chunk(n / p);
      comm.reduce_scatter(data, chunk);
      comm.all_reduce(data);
      reduced[comm.rank()] = data;
      scattered[comm.rank()] = chunk;
    });
    for (int r = 0; r < p; ++r) {
      CHECK(bits_of(reduced[r]) == bits_of(expected));
      CHECK(bits_of(scattered[r]) == bits_of(std::span(expected).subspan(r * (n / p), n / p)));
    }
  }
}

TEST_CASE("threads::communicator moves int32 and uint16 (bf16 bit patterns) and sums them", "[threads]") {
  const world w(3);
  std::vector<std::vector<std::uint16_t>> gathered(3);
  std::vector<std::vector<std::int32_t>> summed(3);
  w.run([&](communicator& comm) {
    const std::array<std::uint16_t, 2> bits{std::uint16_t(0x3f80 + comm.rank()), std::uint16_t(0xbf80)};
    std::vector<std::uint16_t> out(6);
    comm.all_gather(bits, out);
    std::vector<std::int32_t> x{comm.rank(), -comm.rank()};
    comm.all_reduce(x);
    gathered[comm.rank()] = out;
    summed[comm.rank()] = x;
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(gathered[r] == std::vector<std::uint16_t>{0x3f80, 0xbf80, 0x3f81, 0xbf80, 0x3f82, 0xbf80});
    CHECK(summed[r] == std::vector<std::int32_t>{3, -3});
  }
}

TEST_CASE("threads::communicator sums bf16 and f16 values, each addition rounded, in rank order",
          "[threads]") {
  // 1 + 2^-8 + 2^-8 + ...: in bf16 (8 significant bits) each 1 + 2^-8 is a tie that rounds to even
  // (1), so the rank-order sum stays 1, where one f32 sum rounded once would give 1 + 2^-6.
  // f16 (11 significant bits) ties the same way at 1 + 2^-11.
  const int p = 4;
  const world w(p);
  std::vector<float> bf16_sums(p), f16_sums(p), bf16_scattered(p);
  w.run([&](communicator& comm) {
    const float mine = comm.rank() == 0 ? 1.0f : 0x1p-8f;
    std::vector<sg::bfloat16> b{sg::bfloat16(mine)};
    std::vector<sg::float16> h{sg::float16(comm.rank() == 0 ? 1.0f : 0x1p-11f)};
    comm.all_reduce(b);
    comm.all_reduce(h);
    std::vector<sg::bfloat16> chunks(static_cast<std::size_t>(p), sg::bfloat16(static_cast<float>(comm.rank())));
    std::vector<sg::bfloat16> own(1);
    comm.reduce_scatter(chunks, own);
    bf16_sums[comm.rank()] = static_cast<float>(b[0]);
    f16_sums[comm.rank()] = static_cast<float>(h[0]);
    bf16_scattered[comm.rank()] = static_cast<float>(own[0]);
  });
  for (int r = 0; r < p; ++r) {
    CHECK(bf16_sums[r] == 1.0f);
    CHECK(f16_sums[r] == 1.0f);
    CHECK(bf16_scattered[r] == 6.0f);  // 0 + 1 + 2 + 3
  }
}

TEST_CASE("threads::communicator accepts vectors, arrays and spans of non-const elements", "[threads]") {
  const world w(2);
  std::vector<std::vector<float>> seen(2);
  w.run([&](communicator& comm) {
    std::vector<float> in{float(comm.rank())}, out(2);
    comm.all_gather(std::span<float>(in), out);  // a non-const span where a read-only one is expected
    std::array<float, 2> back{};
    comm.all_to_all(out, back);
    comm.send(std::span<float>(back), 1 - comm.rank(), 3);
    std::array<float, 2> got{};
    comm.recv(got, 1 - comm.rank(), 3);
    comm.broadcast(got, 0);  // rank 0 received rank 1's chunk of the all_to_all: {1, 1}
    seen[comm.rank()] = {got.begin(), got.end()};
  });
  for (const auto& got : seen) CHECK(got == std::vector<float>{1.0f, 1.0f});
}

TEST_CASE("threads::communicator gathers and reduces in place", "[threads]") {
  const world w(4);
  std::vector<std::vector<double>> gathered(4), reduced(4);
  w.run([&](communicator& comm) {
    std::vector<double> buffer(8, -1.0);
    auto own = std::span<double>(buffer).subspan(2 * comm.rank(), 2);
    own[0] = comm.rank();
    own[1] = 10.0 * comm.rank();
    comm.all_gather(std::span<const double>(own), std::span<double>(buffer));
    gathered[comm.rank()] = buffer;
    comm.reduce_scatter(std::span<const double>(buffer),
                        std::span<double>(buffer).subspan(2 * comm.rank(), 2));
    reduced[comm.rank()] = {buffer.begin() + 2 * comm.rank(), buffer.begin() + 2 * comm.rank() + 2};
  });
  for (int r = 0; r < 4; ++r) {
    CHECK(gathered[r] == std::vector<double>{0, 0, 1, 10, 2, 20, 3, 30});
    CHECK(reduced[r] == std::vector<double>{4.0 * r, 40.0 * r});
  }
}

TEST_CASE("threads::communicator splits a 2x2 mesh into rows and columns", "[threads]") {
  const world w(4, std::chrono::seconds(2));
  std::vector<std::array<int, 6>> seen(4);
  w.run([&](communicator& comm) {
    const int row = comm.rank() / 2, col = comm.rank() % 2;
    auto rows = comm.split(row, col);  // {0, 1}, {2, 3}
    auto cols = comm.split(col, row);  // {0, 2}, {1, 3}
    std::vector<int> by_row{comm.rank()}, by_col{comm.rank()};
    rows.all_reduce(by_row);
    cols.all_reduce(by_col);
    seen[comm.rank()] = {rows.rank(), rows.size(), cols.rank(), cols.size(), by_row[0], by_col[0]};
  });
  CHECK(seen[0] == std::array<int, 6>{0, 2, 0, 2, 1, 2});
  CHECK(seen[1] == std::array<int, 6>{1, 2, 0, 2, 1, 4});
  CHECK(seen[2] == std::array<int, 6>{0, 2, 1, 2, 5, 2});
  CHECK(seen[3] == std::array<int, 6>{1, 2, 1, 2, 5, 4});
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
    rows.all_reduce(x);
    if (row == 0 && rows.rank() == 0) row0_done.set_value();
    sums[comm.rank()] = x[0];
  });
  CHECK(sums == std::vector<double>{3, 3, 7, 7});
}

TEST_CASE("threads::communicator runs collectives on a 2x4 mesh and nested splits", "[threads]") {
  // rank = 4 row + col; rows hold 4 ranks (tp), columns 2 (dp); pairs split each row in two.
  const world w(8, std::chrono::seconds(2));
  struct result {
    std::vector<int> row_members, pair_members;
    std::vector<double> col_sum, row_scatter;
    int reversed_rank = -1;
  };
  std::vector<result> seen(8);
  w.run([&](communicator& comm) {
    const int row = comm.rank() / 4, col = comm.rank() % 4;
    auto rows = comm.split(row, col);
    auto cols = comm.split(col, row);
    auto pairs = rows.split(col / 2, col);
    auto reversed = comm.split(0, -comm.rank());
    auto& mine = seen[comm.rank()];
    const std::vector<int> me{comm.rank()};
    mine.row_members.resize(4);
    rows.all_gather(me, mine.row_members);
    mine.pair_members.resize(2);
    pairs.all_gather(me, mine.pair_members);
    mine.col_sum = {double(comm.rank()), 1.0};
    cols.all_reduce(mine.col_sum);
    std::vector<double> in(4);
    for (int j = 0; j < 4; ++j) in[j] = 10.0 * j + comm.rank();
    mine.row_scatter.resize(1);
    rows.reduce_scatter(in, mine.row_scatter);
    mine.reversed_rank = reversed.rank();
  });
  for (int r = 0; r < 8; ++r) {
    const int row = r / 4, col = r % 4;
    CAPTURE(r);
    CHECK(seen[r].row_members == std::vector<int>{4 * row, 4 * row + 1, 4 * row + 2, 4 * row + 3});
    CHECK(seen[r].pair_members == std::vector<int>{4 * row + col / 2 * 2, 4 * row + col / 2 * 2 + 1});
    CHECK(seen[r].col_sum == std::vector<double>{double(2 * col + 4), 2.0});
    CHECK(seen[r].row_scatter == std::vector<double>{40.0 * col + (16 * row + 6)});
    CHECK(seen[r].reversed_rank == 7 - r);
  }
}

TEST_CASE("threads::communicator split orders ties in key by rank", "[threads]") {
  const world w(4);
  std::vector<int> ranks(4);
  w.run([&](communicator& comm) {
    auto halves = comm.split(0, comm.rank() < 2 ? 1 : 0);  // keys 1, 1, 0, 0
    ranks[comm.rank()] = halves.rank();
  });
  CHECK(ranks == std::vector<int>{2, 3, 0, 1});
}

TEST_CASE("threads::communicator send and recv", "[threads]") {
  SECTION("a ring: everyone sends before receiving, which buffered sends allow") {
    const int p = GENERATE(2, 3, 8);
    const world w(p);
    std::vector<std::int64_t> totals(p);
    w.run([&](communicator& comm) {
      const int next = (comm.rank() + 1) % p, previous = (comm.rank() + p - 1) % p;
      std::vector<std::int64_t> token{comm.rank()};
      for (int step = 0; step < p - 1; ++step) {
        std::vector<std::int64_t> incoming(1);
        comm.send(token, next, step);
        comm.recv(incoming, previous, step);
        token[0] = incoming[0];
        totals[comm.rank()] += incoming[0];
      }
    });
    for (int r = 0; r < p; ++r) CHECK(totals[r] == std::int64_t(p) * (p - 1) / 2 - r);  // every other rank's
  }

  SECTION("a pipeline: each stage adds its rank to every micro-batch and passes it on") {
    const int p = 4, micro_batches = 6;
    const world w(p);
    std::vector<double> results;
    w.run([&](communicator& comm) {
      for (int m = 0; m < micro_batches; ++m) {
        std::vector<double> batch{double(m), double(m)};
        if (comm.rank() > 0) comm.recv(batch, comm.rank() - 1);
        batch[1] += comm.rank();
        if (comm.rank() < p - 1)
          comm.send(batch, comm.rank() + 1);
        else
          results.insert(results.end(), batch.begin(), batch.end());
      }
    });
    for (int m = 0; m < micro_batches; ++m) {
      CHECK(results[2 * m] == m);
      CHECK(results[2 * m + 1] == m + 6);
    }
  }

  SECTION("messages match by (source, tag), in the order sent") {
    const world w(3);
    std::vector<int> got;
    w.run([&](communicator& comm) {
      if (comm.rank() == 1) {
        for (int i = 0; i < 3; ++i) comm.send(std::vector<int>{10 + i}, 0, 7);
        comm.send(std::vector<int>{1}, 0, 1);
      } else if (comm.rank() == 2) {
        comm.send(std::vector<int>{2}, 0, 1);
      } else {
        std::vector<int> x(1);
        for (auto [source, tag] : {std::pair{2, 1}, {1, 1}, {1, 7}, {1, 7}, {1, 7}}) {
          comm.recv(x, source, tag);
          got.push_back(x[0]);
        }
      }
    });
    CHECK(got == std::vector<int>{2, 1, 10, 11, 12});
  }
}

TEST_CASE("threads::communicator finds size mismatches on every rank", "[threads]") {
  const world w(3, std::chrono::seconds(2));

  SECTION("all_gather: one rank's out is not size * in") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      std::vector<float> in(2), out(comm.rank() == 1 ? 5 : 6);
      comm.all_gather(in, out);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("all_gather") && ContainsSubstring("rank 1's out holds 5 elements") &&
                        ContainsSubstring("3 * 2 = 6"));
  }

  SECTION("all_reduce: ranks pass different sizes") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      std::vector<double> data(comm.rank() == 2 ? 3 : 4);
      comm.all_reduce(data);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("shardgraph: threads all_reduce, rank ") &&
                        ContainsSubstring("rank 2's data holds 3 elements but rank 0's holds 4"));
  }

  SECTION("reduce_scatter: in is not size * out") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      std::vector<double> in(7), out(2);
      comm.reduce_scatter(in, out);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("reduce_scatter") && ContainsSubstring("3 * 2 = 6"));
  }

  SECTION("all_to_all: buffers do not split into size chunks") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      std::vector<std::int64_t> in(4), out(4);
      comm.all_to_all(in, out);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("all_to_all") && ContainsSubstring("do not split into 3 equal chunks"));
  }

  SECTION("all_to_all: in and out overlap") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      std::vector<double> buffer(3);
      comm.all_to_all(std::span<const double>(buffer), std::span<double>(buffer));
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("all_to_all") && ContainsSubstring("overlap"));
  }

  SECTION("broadcast: root out of range, or different roots") {
    const int root = GENERATE(3, -1);
    auto messages = errors_per_rank(w, [&](communicator& comm) {
      std::vector<double> data(2);
      comm.broadcast(data, root);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("broadcast") && ContainsSubstring("is not a rank"));
    messages = errors_per_rank(w, [&](communicator& comm) {
      std::vector<double> data(2);
      comm.broadcast(data, comm.rank() == 0 ? 0 : 1);
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
        comm.all_reduce(data);
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("rank 0 called all_reduce but rank 1 called barrier"));
    messages = errors_per_rank(w, [](communicator& comm) {
      if (comm.rank() == 2)
        comm.all_reduce(std::vector<float>(2));
      else
        comm.all_reduce(std::vector<double>(2));
    });
    for (const auto& m : messages)
      CHECK_THAT(m, ContainsSubstring("rank 0 passes double elements but rank 2 passes float"));
  }

  SECTION("a sub-group's mismatch names the world rank too") {
    auto messages = errors_per_rank(w, [](communicator& comm) {
      auto pair = comm.split(comm.rank() == 0 ? 0 : 1, 0);  // {0}, {1, 2}
      if (comm.rank() == 0) return;
      std::vector<double> in(1), out(comm.rank() == 2 ? 3 : 2);
      pair.all_gather(in, out);
    });
    CHECK_THAT(messages[2], ContainsSubstring("threads all_gather, rank 1 of 2 (world rank 2)") &&
                                ContainsSubstring("rank 1's out holds 3 elements"));
  }
}

TEST_CASE("threads::communicator checks peers and message sizes", "[threads]") {
  const world w(2, std::chrono::seconds(2));
  CHECK_THAT(
      error_of(w, [](communicator& comm) { comm.send(std::vector<int>{1}, 2); }),
      ContainsSubstring("threads send") && ContainsSubstring("peer 2 is not a rank of this group of 2"));
  CHECK_THAT(error_of(w, [](communicator& comm) { comm.send(std::vector<int>{1}, comm.rank()); }),
             ContainsSubstring("names itself as the peer"));
  CHECK_THAT(
      error_of(w,
               [](communicator& comm) {
                 if (comm.rank() == 0)
                   comm.send(std::vector<int>{1, 2, 3, 4}, 1, 9);
                 else {
                   std::vector<int> x(3);
                   comm.recv(x, 0, 9);
                 }
               }),
      ContainsSubstring("threads recv, rank 1 of 2") &&
          ContainsSubstring("rank 0 sent 4 int32 elements with tag 9 but rank 1 receives 3 int32 elements"));
  CHECK_THAT(error_of(w,
                      [](communicator& comm) {
                        std::vector<int> x(1);
                        if (comm.rank() == 1) comm.recv(x, 0, 4);
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
        for (;;) comm.all_reduce(x);
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
          if (comm.rank() == 2) rows.recv(x, 1);
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
    comm.all_reduce(x);
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
