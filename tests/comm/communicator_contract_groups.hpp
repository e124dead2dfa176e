#pragma once
// The Communicator contract's groups and messages: split, send and recv, and the size and rank
// checks. Included after the fixtures (communicator_contract.hpp says how).
#include "comm/communicator_contract.hpp"

TEMPLATE_LIST_TEST_CASE("communicator contract: split groups ranks by color and orders them by key", "[comm]",
                        communicator_fixtures) {
  using F = TestType;
  using namespace communicator_contract;
  for_each_group_size<F>([&](int p, std::size_t) {
    // A rows x columns grid, rank = row * columns + column; pairs split each row in two where it can.
    const int rows = p % 2 == 0 ? 2 : 1, columns = p / rows;
    struct result {
      int row_rank, row_size, column_rank, column_size, pair_size, reversed_rank, tie_rank, parity_rank,
          parity_size;
      std::vector<std::int32_t> row_members, pair_members;
      std::vector<std::int64_t> column_sum;
      std::vector<double> row_scatter;
    };
    const auto seen = F::run(p, [&](auto& c) {
      const int r = c.rank(), row = r / columns, column = r % columns;
      auto row_comm = c.split(row, column);
      auto column_comm = c.split(column, row);
      auto pairs = row_comm.split(column / 2, column);
      auto reversed = c.split(0, -r);
      auto ties = c.split(0, r < p / 2 ? 1 : 0);  // keys 1, ..., 1, 0, ..., 0: ties ordered by rank
      auto parity = c.split(r % 2, -r);           // by parity, in reverse rank order
      result mine{row_comm.rank(),
                  row_comm.size(),
                  column_comm.rank(),
                  column_comm.size(),
                  pairs.size(),
                  reversed.rank(),
                  ties.rank(),
                  parity.rank(),
                  parity.size(),
                  {},
                  {},
                  {},
                  {}};
      auto me = F::make(std::vector<std::int32_t>{r});
      auto row_members = F::make(std::vector<std::int32_t>(static_cast<std::size_t>(columns)));
      comm::all_gather(row_comm, F::template view<std::int32_t>(me),
                       F::template view<std::int32_t>(row_members));
      auto pair_members = F::make(std::vector<std::int32_t>(static_cast<std::size_t>(pairs.size())));
      comm::all_gather(pairs, F::template view<std::int32_t>(me),
                       F::template view<std::int32_t>(pair_members));
      auto column_sum = F::make(std::vector<std::int64_t>{r, 1});
      comm::all_reduce(column_comm, F::template view<std::int64_t>(column_sum));
      std::vector<double> in(static_cast<std::size_t>(columns));
      for (int j = 0; j < columns; ++j) in[static_cast<std::size_t>(j)] = 10.0 * j + r;
      auto scatter_in = F::make(in);
      auto row_scatter = F::make(std::vector<double>(1));
      comm::reduce_scatter(row_comm, F::template view<double>(scatter_in),
                           F::template view<double>(row_scatter));
      c.barrier();  // the parent still works
      mine.row_members = F::template read<std::int32_t>(row_members);
      mine.pair_members = F::template read<std::int32_t>(pair_members);
      mine.column_sum = F::template read<std::int64_t>(column_sum);
      mine.row_scatter = F::template read<double>(row_scatter);
      return mine;
    });
    for (const auto& [r, got] : seen) {
      CAPTURE(r);
      const int row = r / columns, column = r % columns;
      CHECK(got.row_rank == column);
      CHECK(got.row_size == columns);
      CHECK(got.column_rank == row);
      CHECK(got.column_size == rows);
      std::vector<std::int32_t> expected_row, expected_pair;
      for (int q = 0; q < columns; ++q) expected_row.push_back(row * columns + q);
      for (int q = column / 2 * 2; q < std::min(column / 2 * 2 + 2, columns); ++q)
        expected_pair.push_back(row * columns + q);
      CHECK(got.row_members == expected_row);
      CHECK(got.pair_members == expected_pair);
      CHECK(got.pair_size == static_cast<int>(expected_pair.size()));
      CHECK(got.column_sum ==
            std::vector<std::int64_t>{rows * (rows - 1) / 2 * columns + rows * column, rows});
      // sum over the row's ranks q of 10 column + q
      CHECK(got.row_scatter == std::vector<double>{10.0 * column * columns + (row * columns) * columns +
                                                   columns * (columns - 1) / 2.0});
      CHECK(got.reversed_rank == p - 1 - r);
      CHECK(got.tie_rank == (r < p / 2 ? r + (p - p / 2) : r - p / 2));
      int parity_size = 0, higher = 0;
      for (int q = r % 2; q < p; q += 2) {
        ++parity_size;
        if (q > r) ++higher;
      }
      CHECK(got.parity_size == parity_size);
      CHECK(got.parity_rank == higher);
    }
  });
}

TEMPLATE_LIST_TEST_CASE("communicator contract: send and recv", "[comm]", communicator_fixtures) {
  using F = TestType;
  using namespace communicator_contract;
  for_each_group_size<F>([&](int p, std::size_t) {
    if (p == 1) return;  // point to point needs a peer

    {  // a ring, each token passed on p - 1 times
      const auto totals = F::run(p, [&](auto& c) {
        const int r = c.rank(), next = (r + 1) % p, previous = (r + p - 1) % p;
        auto token = F::make(std::vector<std::int64_t>{r});
        auto incoming = F::make(std::vector<std::int64_t>(1));
        std::int64_t total = 0;
        for (int step = 0; step < p - 1; ++step) {
          // with buffered sends everyone sends first; otherwise rank 0 sends first, the others receive first
          const bool send_first = F::buffered_sends || r == 0;
          if (send_first) comm::send(c, F::template view<std::int64_t>(token), next, step);
          comm::recv(c, F::template view<std::int64_t>(incoming), previous, step);
          if (!send_first) comm::send(c, F::template view<std::int64_t>(token), next, step);
          token = F::make(F::template read<std::int64_t>(incoming));
          total += F::template read<std::int64_t>(incoming)[0];
        }
        return total;
      });
      for (const auto& [r, total] : totals)
        CHECK(total == std::int64_t{p} * (p - 1) / 2 - r);  // every other rank's
    }
    {  // large messages, passed one step along the ring
      // Far above any eager limit: the data moves while the sender waits in its own recv, where
      // sends are buffered.
      const std::size_t n = std::size_t{1} << 20;
      const auto got = F::run(p, [&](auto& c) {
        const int r = c.rank(), next = (r + 1) % p, previous = (r + p - 1) % p;
        auto mine = F::make(std::vector<double>(n, static_cast<double>(r)));
        auto theirs = F::make(std::vector<double>(n, -1.0));
        const bool send_first = F::buffered_sends || r == 0;
        if (send_first) c.send(std::span<const double>(F::template view<double>(mine)), next, 5);
        c.recv(F::template view<double>(theirs), previous, 5);
        if (!send_first) c.send(std::span<const double>(F::template view<double>(mine)), next, 5);
        const auto values = F::template read<double>(theirs);
        return std::pair{values.front(), values.back()};
      });
      for (const auto& [r, ends] : got) {
        CHECK(ends.first == static_cast<double>((r + p - 1) % p));
        CHECK(ends.second == static_cast<double>((r + p - 1) % p));
      }
    }
    {  // a pipeline: each stage adds its rank to every micro-batch and passes it on
      const int micro_batches = 6;
      const auto results = F::run(p, [&](auto& c) {
        const int r = c.rank();
        std::vector<double> last;
        for (int m = 0; m < micro_batches; ++m) {
          auto batch = F::make(std::vector<double>{double(m), double(m)});
          if (r > 0) comm::recv(c, F::template view<double>(batch), r - 1);
          auto values = F::template read<double>(batch);
          values[1] += r;
          batch = F::make(values);
          if (r < p - 1)
            comm::send(c, F::template view<double>(batch), r + 1);
          else
            last.insert(last.end(), values.begin(), values.end());
        }
        return last;
      });
      if (results.count(p - 1) != 0) {
        const auto& last = results.at(p - 1);
        CHECK(last.size() == 2 * static_cast<std::size_t>(micro_batches));
        for (int m = 0; m < micro_batches && last.size() == 2 * static_cast<std::size_t>(micro_batches);
             ++m) {
          CHECK(last[2 * static_cast<std::size_t>(m)] == m);
          CHECK(last[2 * static_cast<std::size_t>(m) + 1] == m + p * (p - 1) / 2);
        }
      }
    }
    if constexpr (F::matches_tags) {
      if (p >= 3) {  // messages match by (source, tag), in the order sent
        const auto got = F::run(p, [&](auto& c) {
          std::vector<int> received;
          if (c.rank() == 1) {
            for (int i = 0; i < 3; ++i) comm::send(c, std::vector<int>{10 + i}, 0, 7);
            comm::send(c, std::vector<int>{1}, 0, 1);
          } else if (c.rank() == 2) {
            comm::send(c, std::vector<int>{2}, 0, 1);
          } else if (c.rank() == 0) {
            std::vector<int> x(1);
            for (auto [source, tag] : {std::pair{2, 1}, {1, 1}, {1, 7}, {1, 7}, {1, 7}}) {
              comm::recv(c, x, source, tag);
              received.push_back(x[0]);
            }
          }
          c.barrier();
          return received;
        });
        if (got.count(0) != 0) CHECK(got.at(0) == std::vector<int>{2, 1, 10, 11, 12});
      }
    }
  });
}

TEMPLATE_LIST_TEST_CASE("communicator contract: wrong sizes and ranks throw shardgraph::error on every rank",
                        "[comm]", communicator_fixtures) {
  using F = TestType;
  using namespace communicator_contract;
  for_each_group_size<F>([&](int p, std::size_t np) {
    const auto check_every_rank = [&](const std::map<int, std::string>& messages, const auto& matcher) {
      for (const auto& [rank, message] : messages) {
        CAPTURE(rank);
        CHECK_THAT(message, matcher);
      }
    };
    check_every_rank(
        F::errors(p,
                  [&](auto& c) {
                    auto in = F::make(std::vector<double>(2));
                    auto out = F::make(std::vector<double>(2 * np + 1));
                    comm::all_gather(c, F::template view<double>(in), F::template view<double>(out));
                  }),
        ContainsSubstring("all_gather") && ContainsSubstring("out holds " + std::to_string(2 * np + 1)) &&
            ContainsSubstring("size() * in.size()"));
    check_every_rank(F::errors(p,
                               [&](auto& c) {
                                 auto in = F::make(std::vector<float>(3 * np + 1));
                                 auto out = F::make(std::vector<float>(3));
                                 comm::reduce_scatter(c, F::template view<float>(in),
                                                      F::template view<float>(out));
                               }),
                     ContainsSubstring("reduce_scatter") && ContainsSubstring("size() * out.size()"));
    check_every_rank(F::errors(p,
                               [&](auto& c) {
                                 auto in = F::make(std::vector<std::int32_t>(2 * np));
                                 auto out = F::make(std::vector<std::int32_t>(2 * np + 2));
                                 comm::all_to_all(c, F::template view<std::int32_t>(in),
                                                  F::template view<std::int32_t>(out));
                               }),
                     ContainsSubstring("all_to_all") && ContainsSubstring("the same size"));
    if (p > 1)
      check_every_rank(F::errors(p,
                                 [&](auto& c) {
                                   auto in = F::make(std::vector<std::int64_t>(np + 1));
                                   auto out = F::make(std::vector<std::int64_t>(np + 1));
                                   comm::all_to_all(c, F::template view<std::int64_t>(in),
                                                    F::template view<std::int64_t>(out));
                                 }),
                       ContainsSubstring("all_to_all") &&
                           ContainsSubstring("do not split into " + std::to_string(p) + " equal chunks"));
    for (const int root : {p, -1})
      check_every_rank(F::errors(p,
                                 [&](auto& c) {
                                   auto data = F::make(std::vector<double>(2));
                                   comm::broadcast(c, F::template view<double>(data), root);
                                 }),
                       ContainsSubstring("broadcast") &&
                           ContainsSubstring("root " + std::to_string(root) + " is not a rank"));
    check_every_rank(
        F::errors(p,
                  [&](auto& c) {
                    auto data = F::make(std::vector<double>(1));
                    comm::send(c, F::template view<double>(data), p, 0);
                  }),
        ContainsSubstring("send") && ContainsSubstring("peer " + std::to_string(p) + " is not a rank"));
    check_every_rank(F::errors(p,
                               [&](auto& c) {
                                 auto data = F::make(std::vector<double>(1));
                                 comm::recv(c, F::template view<double>(data), -1, 0);
                               }),
                     ContainsSubstring("recv") && ContainsSubstring("peer -1 is not a rank"));
  });
}
