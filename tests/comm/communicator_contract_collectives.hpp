#pragma once
// The Communicator contract's collectives: every collective against hand-computed results, the
// element types, the sums' bits, in place, and comm/collectives.hpp's functions. Included after the
// fixtures (communicator_contract.hpp says how).
#include "comm/communicator_contract.hpp"

TEMPLATE_LIST_TEST_CASE("communicator contract: the concept, and cheap moves", "[comm]",
                        communicator_fixtures) {
  using C = typename TestType::communicator;
  STATIC_REQUIRE(shardgraph::comm::Communicator<C>);
  STATIC_REQUIRE(std::is_nothrow_move_constructible_v<C>);
}

TEMPLATE_LIST_TEST_CASE("communicator contract: every collective gives the hand-computed result", "[comm]",
                        communicator_fixtures) {
  using F = TestType;
  using namespace communicator_contract;
  for_each_group_size<F>([&](int p, std::size_t) {
    check_collectives<F, float>(p);
    check_collectives<F, double>(p);
    check_collectives<F, std::int32_t>(p);
    check_collectives<F, std::int64_t>(p);
  });
}

TEMPLATE_LIST_TEST_CASE("communicator contract: 64-bit and 8-bit integers sum exactly, wrapping", "[comm]",
                        communicator_fixtures) {
  using F = TestType;
  using namespace communicator_contract;
  for_each_group_size<F>([&](int p, std::size_t) {
    const auto sums = F::run(p, [&](auto& c) {
      const int r = c.rank();
      auto big = F::make(std::vector<std::int64_t>{(std::int64_t{1} << 40) * r, -r});
      c.all_reduce(F::template view<std::int64_t>(big));
      auto small =
          F::make(std::vector<std::int8_t>{static_cast<std::int8_t>(r), static_cast<std::int8_t>(-r)});
      c.all_reduce(F::template view<std::int8_t>(small));
      return std::pair{F::template read<std::int64_t>(big), F::template read<std::int8_t>(small)};
    });
    for (const auto& [rank, got] : sums) {
      CHECK(got.first ==
            std::vector<std::int64_t>{(std::int64_t{1} << 40) * p * (p - 1) / 2, -p * (p - 1) / 2});
      CHECK(got.second == std::vector<std::int8_t>{static_cast<std::int8_t>(p * (p - 1) / 2),
                                                   static_cast<std::int8_t>(-(p * (p - 1) / 2))});
    }
    if constexpr (F::sums_16_bit_integers) {
      const auto bits = F::run(p, [&](auto& c) {
        auto b = F::make(std::vector<std::uint16_t>{static_cast<std::uint16_t>(0x3f80 + c.rank()), 0xffff});
        c.all_reduce(F::template view<std::uint16_t>(b));  // integer sums, wrapping as std::uint16_t does
        return F::template read<std::uint16_t>(b);
      });
      for (const auto& [rank, b] : bits) {
        CHECK(b[0] == static_cast<std::uint16_t>(0x3f80 * p + p * (p - 1) / 2));
        CHECK(b[1] == static_cast<std::uint16_t>(0xffff * p));
      }
    }
  });
}

TEMPLATE_LIST_TEST_CASE("communicator contract: an all_reduce gives every rank the same bits", "[comm]",
                        communicator_fixtures) {
  using F = TestType;
  using namespace communicator_contract;
  for_each_group_size<F>([&](int p, std::size_t) {
    // Irregular floats: where the order of summation is the communicator's own, every rank still
    // gets the same bits.
    const auto reduced = F::run(p, [&](auto& c) {
      std::vector<float> irregular(257);
      for (std::size_t i = 0; i < irregular.size(); ++i)
        irregular[i] = 1.0f / static_cast<float>(3 + i + 7 * static_cast<std::size_t>(c.rank())) +
                       static_cast<float>(i) * 1e-3f;
      auto x = F::make(irregular);
      c.all_reduce(F::template view<float>(x));
      // every rank's result, gathered to every rank (the ranks may be processes of their own)
      auto everyone = F::make(std::vector<float>(static_cast<std::size_t>(p) * irregular.size()));
      comm::all_gather(c, F::template view<float>(x), F::template view<float>(everyone));
      return std::pair{bits_of(F::template read<float>(x)), bits_of(F::template read<float>(everyone))};
    });
    for (const auto& [rank, got] : reduced) {
      const auto& [mine, everyone] = got;
      CHECK(everyone.size() == static_cast<std::size_t>(p) * mine.size());
      for (int q = 0; q < p && everyone.size() == static_cast<std::size_t>(p) * mine.size(); ++q) {
        CAPTURE(q);
        const auto first =
            everyone.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(q) * mine.size());
        CHECK(std::equal(mine.begin(), mine.end(), first));
      }
    }
  });
}

TEMPLATE_LIST_TEST_CASE("communicator contract: sums in rank order, each addition rounded", "[comm]",
                        communicator_fixtures) {
  using F = TestType;
  using namespace communicator_contract;
  if constexpr (F::sums_in_rank_order) {
    for_each_group_size<F>([&](int p, std::size_t) {
      // (n) all-reduced, and (p * m) reduce-scattered to (m), from awkward values: the sums in rank
      // order 0, 1, ..., p-1, bit for bit, in two runs.
      const std::size_t n = 29, m = 3;
      const auto expected_sum = [&](auto zero, std::size_t i) {
        using T = decltype(zero);
        T sum = awkward_value<T>(0, i);
        for (int q = 1; q < p; ++q) sum += awkward_value<T>(q, i);
        return sum;
      };
      for (int run = 0; run < 2; ++run) {
        const auto seen = F::run(p, [&](auto& c) {
          std::vector<double> values(n), chunks(static_cast<std::size_t>(p) * m);
          std::vector<float> floats(n);
          for (std::size_t i = 0; i < n; ++i) {
            values[i] = awkward_value<double>(c.rank(), i);
            floats[i] = awkward_value<float>(c.rank(), i);
          }
          for (std::size_t i = 0; i < chunks.size(); ++i) chunks[i] = awkward_value<double>(c.rank(), i);
          auto d = F::make(values);
          auto f = F::make(floats);
          auto in = F::make(chunks);
          auto out = F::make(std::vector<double>(m));
          c.all_reduce(F::template view<double>(d));
          c.all_reduce(F::template view<float>(f));
          c.reduce_scatter(std::span<const double>(F::template view<double>(in)),
                           F::template view<double>(out));
          return std::tuple{F::template read<double>(d), F::template read<float>(f),
                            F::template read<double>(out)};
        });
        for (const auto& [rank, got] : seen) {
          const auto& [d, f, out] = got;
          std::vector<double> want_d(n), want_out(m);
          std::vector<float> want_f(n);
          for (std::size_t i = 0; i < n; ++i) {
            want_d[i] = expected_sum(0.0, i);
            want_f[i] = expected_sum(0.0f, i);
          }
          for (std::size_t e = 0; e < m; ++e)
            want_out[e] = expected_sum(0.0, static_cast<std::size_t>(rank) * m + e);
          CHECK(bits_of(d) == bits_of(want_d));
          CHECK(bits_of(f) == bits_of(want_f));
          CHECK(bits_of(out) == bits_of(want_out));
          CHECK(std::signbit(d[0]));
        }
      }
      // Another order gives other bits: the order is what is tested.
      if (p > 2) {
        double reverse = awkward_value<double>(p - 1, 1);
        for (int q = p - 2; q >= 0; --q) reverse += awkward_value<double>(q, 1);
        CHECK(reverse != expected_sum(0.0, 1));
      }
      // 1 + 2^-8 + 2^-8 + ...: in bf16 (8 significant bits) each 1 + 2^-8 is a tie that rounds to
      // even (1), so the rank-order sum stays 1, where one f32 sum rounded once would give more.
      // f16 (11 significant bits) ties the same way at 1 + 2^-11.
      const auto halves = F::run(p, [&](auto& c) {
        const bool first = c.rank() == 0;
        auto b = F::make(std::vector<shardgraph::bfloat16>{shardgraph::bfloat16(first ? 1.0f : 0x1p-8f)});
        auto h = F::make(std::vector<shardgraph::float16>{shardgraph::float16(first ? 1.0f : 0x1p-11f),
                                                          shardgraph::float16(2.0f)});
        auto chunks = F::make(std::vector<shardgraph::bfloat16>(
            static_cast<std::size_t>(p), shardgraph::bfloat16(static_cast<float>(c.rank()))));
        auto own = F::make(std::vector<shardgraph::bfloat16>(1));
        c.all_reduce(F::template view<shardgraph::bfloat16>(b));
        c.all_reduce(F::template view<shardgraph::float16>(h));
        comm::reduce_scatter(c, F::template view<shardgraph::bfloat16>(chunks),
                             F::template view<shardgraph::bfloat16>(own));
        return std::array<float, 4>{static_cast<float>(F::template read<shardgraph::bfloat16>(b)[0]),
                                    static_cast<float>(F::template read<shardgraph::float16>(h)[0]),
                                    static_cast<float>(F::template read<shardgraph::float16>(h)[1]),
                                    static_cast<float>(F::template read<shardgraph::bfloat16>(own)[0])};
      });
      for (const auto& [rank, got] : halves) {
        CHECK(got[0] == 1.0f);
        CHECK(got[1] == 1.0f);
        CHECK(got[2] == 2.0f * static_cast<float>(p));
        CHECK(got[3] == static_cast<float>(p * (p - 1) / 2));  // 0 + 1 + ... + (p - 1)
      }
    });
  } else {
    SUCCEED("this communicator chooses its own order of summation");
  }
}

TEMPLATE_LIST_TEST_CASE("communicator contract: gathers and reduces in place", "[comm]",
                        communicator_fixtures) {
  using F = TestType;
  using namespace communicator_contract;
  for_each_group_size<F>([&](int p, std::size_t np) {
    const auto seen = F::run(p, [&](auto& c) {
      const auto r = static_cast<std::size_t>(c.rank());
      std::vector<double> values(2 * np, -1.0);
      values[2 * r] = static_cast<double>(r);
      values[2 * r + 1] = 10.0 * static_cast<double>(r);
      auto buffer = F::make(values);
      const std::span<double> whole = F::template view<double>(buffer);
      c.all_gather(std::span<const double>(whole.subspan(2 * r, 2)), whole);
      const auto gathered = F::template read<double>(buffer);
      c.reduce_scatter(std::span<const double>(whole), whole.subspan(2 * r, 2));
      const auto reduced = F::template read<double>(buffer);
      return std::pair{gathered,
                       std::vector<double>(reduced.begin() + static_cast<std::ptrdiff_t>(2 * r),
                                           reduced.begin() + static_cast<std::ptrdiff_t>(2 * r + 2))};
    });
    std::vector<double> expected_gather;
    for (std::size_t q = 0; q < np; ++q)
      expected_gather.insert(expected_gather.end(), {double(q), 10.0 * double(q)});
    for (const auto& [rank, got] : seen) {
      CHECK(got.first == expected_gather);
      CHECK(got.second == std::vector<double>{double(p * rank), 10.0 * double(p * rank)});
    }
  });
}

TEMPLATE_LIST_TEST_CASE("communicator contract: all_to_all in place works or is refused as an overlap",
                        "[comm]", communicator_fixtures) {
  using F = TestType;
  using namespace communicator_contract;
  for_each_group_size<F>([&](int p, std::size_t np) {
    const std::size_t m = 2;
    const auto values_of = [&](int r) {
      std::vector<std::int32_t> v(np * m);
      for (std::size_t j = 0; j < np; ++j)
        for (std::size_t e = 0; e < m; ++e) v[j * m + e] = static_cast<std::int32_t>(100 * r + 10 * j + e);
      return v;
    };
    if constexpr (F::all_to_all_in_place) {
      for (const auto& [rank, got] : F::run(p, [&](auto& c) {
             auto x = F::make(values_of(c.rank()));
             const auto view = F::template view<std::int32_t>(x);
             c.all_to_all(std::span<const std::int32_t>(view), view);
             return F::template read<std::int32_t>(x);
           }))
        for (std::size_t i = 0; i < np; ++i)
          for (std::size_t e = 0; e < m; ++e)
            CHECK(got[i * m + e] ==
                  static_cast<std::int32_t>(100 * i + 10 * static_cast<std::size_t>(rank) + e));
    } else {
      for (const auto& [rank, message] : F::errors(p, [&](auto& c) {
             auto x = F::make(values_of(c.rank()));
             const auto view = F::template view<std::int32_t>(x);
             comm::all_to_all(c, view, view);
           }))
        CHECK_THAT(message, ContainsSubstring("all_to_all") && ContainsSubstring("overlap"));
    }
  });
}

TEMPLATE_LIST_TEST_CASE("communicator contract: bf16 bits and plain structs move unchanged", "[comm]",
                        communicator_fixtures) {
  using F = TestType;
  using namespace communicator_contract;
  struct sample {
    std::int32_t id;
    float weight;
    std::uint8_t flags[3];
  };
  for_each_group_size<F>([&](int p, std::size_t np) {
    const auto seen = F::run(p, [&](auto& c) {
      const int r = c.rank();
      // bf16 bit patterns around inf and NaN, and this rank's value
      auto bits = sequence_of<std::uint16_t>(2 * np, 0x7f70, 1);
      bits[0] = shardgraph::float_to_bf16(static_cast<float>(r));
      auto in = F::make(bits);
      auto gathered = F::make(std::vector<std::uint16_t>(2 * np * np));
      comm::all_gather(c, F::template view<std::uint16_t>(in), F::template view<std::uint16_t>(gathered));
      auto exchanged = F::make(std::vector<std::uint16_t>(2 * np));
      comm::all_to_all(c, F::template view<std::uint16_t>(in), F::template view<std::uint16_t>(exchanged));
      auto shared = F::make(r == p - 1 ? bits : std::vector<std::uint16_t>(2 * np));
      comm::broadcast(c, F::template view<std::uint16_t>(shared), p - 1);
      auto records = F::make(std::vector<sample>{sample{r, 0.5f * static_cast<float>(r), {1, 2, 3}}});
      auto all_records = F::make(std::vector<sample>(np));
      comm::all_gather(c, F::template view<sample>(records), F::template view<sample>(all_records));
      // and along a ring by send and recv: rank 0 sends first (the others receive first)
      auto their_bits = F::make(std::vector<std::uint16_t>(2 * np));
      auto their_record = F::make(std::vector<sample>(1));
      if (p > 1) {
        const int next = (r + 1) % p, previous = (r + p - 1) % p;
        if (r == 0) comm::send(c, F::template view<std::uint16_t>(in), next, 1);
        if (r == 0) comm::send(c, F::template view<sample>(records), next, 2);
        comm::recv(c, F::template view<std::uint16_t>(their_bits), previous, 1);
        comm::recv(c, F::template view<sample>(their_record), previous, 2);
        if (r != 0) comm::send(c, F::template view<std::uint16_t>(in), next, 1);
        if (r != 0) comm::send(c, F::template view<sample>(records), next, 2);
      }
      return std::tuple{
          F::template read<std::uint16_t>(gathered),   F::template read<std::uint16_t>(exchanged),
          F::template read<std::uint16_t>(shared),     F::template read<sample>(all_records),
          F::template read<std::uint16_t>(their_bits), F::template read<sample>(their_record)};
    });
    for (const auto& [rank, got] : seen) {
      const auto& [gathered, exchanged, shared, records, their_bits, their_record] = got;
      if (p > 1) {
        const int previous = (rank + p - 1) % p;
        CHECK(shardgraph::bf16_to_float(their_bits[0]) == static_cast<float>(previous));
        CHECK(their_bits[1] == 0x7f71);
        CHECK(their_record[0].id == previous);
        CHECK(their_record[0].weight == 0.5f * static_cast<float>(previous));
        CHECK(their_record[0].flags[2] == 3);
      }
      for (std::size_t q = 0; q < np; ++q) {
        CHECK(shardgraph::bf16_to_float(gathered[2 * np * q]) == static_cast<float>(q));
        CHECK(gathered[2 * np * q + 1] == 0x7f71);
        CHECK(records[q].id == static_cast<std::int32_t>(q));
        CHECK(records[q].weight == 0.5f * static_cast<float>(q));
        CHECK(records[q].flags[2] == 3);
        // chunk q of exchanged: element 2 rank, 2 rank + 1 of rank q's bits
        const auto from = [&](std::size_t e) {
          return e == 0 ? shardgraph::float_to_bf16(static_cast<float>(q))
                        : static_cast<std::uint16_t>(0x7f70 + e);
        };
        CHECK(exchanged[2 * q] == from(2 * static_cast<std::size_t>(rank)));
        CHECK(exchanged[2 * q + 1] == from(2 * static_cast<std::size_t>(rank) + 1));
      }
      auto expected_shared = sequence_of<std::uint16_t>(2 * np, 0x7f70, 1);
      expected_shared[0] = shardgraph::float_to_bf16(static_cast<float>(p - 1));
      CHECK(shared == expected_shared);
    }
  });
}

TEMPLATE_LIST_TEST_CASE("communicator contract: comm's functions take any contiguous buffer", "[comm]",
                        communicator_fixtures) {
  using F = TestType;
  using namespace communicator_contract;
  for_each_group_size<F>([&](int p, std::size_t np) {
    // Spans of non-const elements where read-only ones are expected, through every function.
    const auto seen = F::run(p, [&](auto& c) {
      const int r = c.rank();
      auto in = F::make(std::vector<float>{static_cast<float>(r)});
      auto gathered = F::make(std::vector<float>(np));
      comm::all_gather(c, F::template view<float>(in), F::template view<float>(gathered));
      auto back = F::make(std::vector<float>(np));
      comm::all_to_all(c, F::template view<float>(gathered), F::template view<float>(back));
      auto sum = F::make(std::vector<float>{1.0f, static_cast<float>(r)});
      comm::all_reduce(c, F::template view<float>(sum));
      auto chunk = F::make(std::vector<float>(1));
      comm::reduce_scatter(c, F::template view<float>(gathered), F::template view<float>(chunk));
      auto root_value = F::make(std::vector<float>{static_cast<float>(r)});
      comm::broadcast(c, F::template view<float>(root_value), p - 1);
      auto received = F::make(std::vector<float>{-1.0f});
      if (p > 1) {  // a ring: rank 0 sends first, the others receive first
        const int next = (r + 1) % p, previous = (r + p - 1) % p;
        if (r == 0) comm::send(c, F::template view<float>(in), next, 4);
        comm::recv(c, F::template view<float>(received), previous, 4);
        if (r != 0) comm::send(c, F::template view<float>(in), next, 4);
      }
      return std::tuple{F::template read<float>(back), F::template read<float>(sum),
                        F::template read<float>(chunk), F::template read<float>(root_value),
                        F::template read<float>(received)};
    });
    for (const auto& [rank, got] : seen) {
      const auto& [back, sum, chunk, root_value, received] = got;
      CHECK(back == std::vector<float>(np, static_cast<float>(rank)));
      CHECK(sum == std::vector<float>{static_cast<float>(p), static_cast<float>(p * (p - 1) / 2)});
      CHECK(chunk == std::vector<float>{static_cast<float>(p * rank)});
      CHECK(root_value == std::vector<float>{static_cast<float>(p - 1)});
      CHECK(received == std::vector<float>{p > 1 ? static_cast<float>((rank + p - 1) % p) : -1.0f});
    }
    // Host memory: std::vector and std::array themselves.
    if constexpr (F::host_memory) {
      const auto host = F::run(p, [&](auto& c) {
        const int r = c.rank();
        const std::array<std::uint16_t, 2> bits{std::uint16_t(0x3f80 + r), std::uint16_t(0xbf80)};
        std::vector<std::uint16_t> out(2 * np);
        comm::all_gather(c, bits, out);
        std::vector<std::int32_t> x{r, -r};
        comm::all_reduce(c, x);
        std::array<float, 1> root_value{static_cast<float>(r)};
        comm::broadcast(c, root_value, 0);
        std::vector<double> in(np, static_cast<double>(r)), chunk(1);
        comm::reduce_scatter(c, in, chunk);
        std::vector<double> exchanged(np);
        comm::all_to_all(c, in, exchanged);
        std::array<float, 2> received{-1.0f, -1.0f};
        if (p > 1 && F::buffered_sends) {
          comm::send(c, std::array<float, 2>{static_cast<float>(r), 1.0f}, (r + 1) % p, 3);
          comm::recv(c, received, (r + p - 1) % p, 3);
        }
        return std::tuple{out, x, root_value[0], chunk, exchanged, received};
      });
      for (const auto& [rank, got] : host) {
        const auto& [out, x, root_value, chunk, exchanged, received] = got;
        if (p > 1 && F::buffered_sends)
          CHECK(received == std::array<float, 2>{static_cast<float>((rank + p - 1) % p), 1.0f});
        for (std::size_t q = 0; q < np; ++q) {
          CHECK(out[2 * q] == 0x3f80 + q);
          CHECK(out[2 * q + 1] == 0xbf80);
          CHECK(exchanged[q] == static_cast<double>(q));
        }
        CHECK(x == std::vector<std::int32_t>{p * (p - 1) / 2, -p * (p - 1) / 2});
        CHECK(root_value == 0.0f);
        CHECK(chunk == std::vector<double>{static_cast<double>(p * (p - 1) / 2)});
      }
    }
  });
}
