#pragma once
// The Communicator contract (comm/communicator.hpp) as one test body, run on every communicator:
// each collective against hand-computed results on every group size the fixture offers, in place,
// over several element types, through the span members and through comm/collectives.hpp's
// functions; split; send and recv; the size checks. What only one communicator does (a world's
// timeout, MPI's argument agreement, NCCL's device-memory check) stays in that communicator's file.
//
// Use: include this header, define the fixture types, list them as `communicator_fixtures` (a
// std::tuple), then include communicator_contract_collectives.hpp and _groups.hpp. A fixture F gives
//   F::communicator                      the Communicator type
//   F::rank_counts()                     the group sizes to test (std::vector<int>)
//   F::run(p, fn)                        fn(communicator&) -> R on p ranks; returns std::map<int, R>
//                                        of what each rank that ran in this process returned
//   F::errors(p, fn)                     the same, returning the message of the shardgraph::error each
//                                        rank threw ("" where none)
//   F::make(std::vector<T>)              a buffer of memory the communicator moves, holding the values
//   F::view<T>(buffer&)                  a std::span<T> of it; F::read<T>(buffer) its values
// and what it promises beyond the common contract:
//   sums_in_rank_order     sums are taken in rank order 0, 1, ..., size-1, each addition rounded
//   buffered_sends         send returns before its recv is posted (every rank may send first)
//   matches_tags           recv takes the first message of its (source, tag)
//   sums_16_bit_integers   all_reduce sums std::uint16_t
//   all_to_all_in_place    all_to_all(x, x) works (else it is refused: in and out overlap)
//   host_memory            buffers are host memory (std::vector, std::array go straight in)
// Catch2's assertions are not thread-safe: ranks only return what they saw, and the test thread
// checks it after run has joined them.
#include <shardgraph/comm/collectives.hpp>
#include <shardgraph/comm/communicator.hpp>
#include <shardgraph/core/half.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "catch.hpp"

namespace communicator_contract {

namespace comm = shardgraph::comm;
using shardgraph::testing::ContainsSubstring;

template <class T>
std::vector<T> sequence_of(std::size_t n, T first, T step) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(first + static_cast<T>(i) * step);
  return v;
}

// The bit patterns of floats or doubles, so that a comparison tells identical bits from equal values.
template <class T>
auto bits_of(std::span<const T> values) {
  using bits = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  std::vector<bits> out;
  for (T v : values) out.push_back(std::bit_cast<bits>(v));
  return out;
}
template <class T>
auto bits_of(const std::vector<T>& values) {
  return bits_of(std::span<const T>(values));
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

// make, view and read of a fixture whose communicator moves host memory: a buffer is a std::vector.
struct host_buffers {
  template <class T>
  static std::vector<T> make(std::vector<T> values) {
    return values;
  }
  template <class T>
  static std::span<T> view(std::vector<T>& buffer) {
    return buffer;
  }
  template <class T>
  static std::vector<T> read(const std::vector<T>& buffer) {
    return buffer;
  }
};

// F::run and F::errors of a fixture whose ranks are threads of one process: `world` runs fn on each
// (world.run(fn) calls fn(Communicator&) on world.size() threads and joins them).
template <class Communicator, class World, class Fn>
auto run_threads(const World& world, Fn&& fn) {
  using communicator = Communicator;
  using result = decltype(fn(std::declval<communicator&>()));
  std::vector<std::optional<result>> seen(static_cast<std::size_t>(world.size()));
  world.run([&](communicator& c) { seen[static_cast<std::size_t>(c.rank())] = fn(c); });
  std::map<int, result> by_rank;
  for (int r = 0; r < world.size(); ++r) by_rank.emplace(r, std::move(*seen[static_cast<std::size_t>(r)]));
  return by_rank;
}
template <class Communicator, class World, class Fn>
std::map<int, std::string> errors_of_threads(const World& world, Fn&& fn) {
  using communicator = Communicator;
  std::vector<std::string> messages(static_cast<std::size_t>(world.size()));
  try {
    world.run([&](communicator& c) {
      try {
        fn(c);
      } catch (const shardgraph::error& e) {
        messages[static_cast<std::size_t>(c.rank())] = e.what();
        throw;
      }
    });
  } catch (const std::exception&) {
  }
  std::map<int, std::string> by_rank;
  for (int r = 0; r < world.size(); ++r) by_rank.emplace(r, messages[static_cast<std::size_t>(r)]);
  return by_rank;
}

// Runs check(p, np) for each group size p that fixture F offers (np: p as a std::size_t), with p
// in the message of every assertion that fails in it.
template <class F, class Check>
void for_each_group_size(Check&& check) {
  for (const int p : F::rank_counts()) {
    CAPTURE(p);
    check(p, static_cast<std::size_t>(p));
  }
}

// The contract's hand-computed collectives in one element type, on p ranks (called from
// for_each_group_size, which names p in the failures).
template <class F, class T>
void check_collectives(int p) {
  const auto np = static_cast<std::size_t>(p);
  const std::size_t n = 5;  // elements per rank (per chunk where a collective splits)
  // 0 and 1 elements leave some ranks without a slice of an all_reduce; 7 does not divide among 2,
  // 3, 4 or 8 ranks. data[i] on rank r = 10 (r + 1) + i sums to 5 p (p + 1) + p i.
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{64}}) {
    const auto reduced = F::run(p, [&](auto& c) {
      auto data = F::make(sequence_of<T>(count, static_cast<T>(10 * (c.rank() + 1)), T(1)));
      c.all_reduce(F::template view<T>(data));
      return F::template read<T>(data);
    });
    CAPTURE(count);
    for (const auto& [rank, data] : reduced)
      for (std::size_t i = 0; i < count; ++i)
        CHECK(data[i] == static_cast<T>(5 * p * (p + 1) + p * static_cast<int>(i)));
  }

  // all_gather: out holds rank k's in = {100 k + i} at offset k n.
  for (const auto& [rank, out] : F::run(p, [&](auto& c) {
         auto in = F::make(sequence_of<T>(n, static_cast<T>(100 * c.rank()), T(1)));
         auto out = F::make(std::vector<T>(np * n, T(-1)));
         c.all_gather(std::span<const T>(F::template view<T>(in)), F::template view<T>(out));
         return F::template read<T>(out);
       }))
    for (std::size_t k = 0; k < np; ++k)
      for (std::size_t i = 0; i < n; ++i) CHECK(out[k * n + i] == static_cast<T>(100 * k + i));

  // reduce_scatter: rank r gets the sum over q of (q + r n + i) = p (p - 1) / 2 + p (r n + i).
  for (const auto& [rank, out] : F::run(p, [&](auto& c) {
         auto in = F::make(sequence_of<T>(np * n, static_cast<T>(c.rank()), T(1)));
         auto out = F::make(std::vector<T>(n, T(-1)));
         c.reduce_scatter(std::span<const T>(F::template view<T>(in)), F::template view<T>(out));
         return F::template read<T>(out);
       }))
    for (std::size_t i = 0; i < n; ++i)
      CHECK(out[i] ==
            static_cast<T>(p * (p - 1) / 2 + p * static_cast<int>(static_cast<std::size_t>(rank) * n + i)));

  // all_to_all: chunk j of rank i's in, {100 i + 10 j + e}, lands in chunk i of rank j's out.
  for (const auto& [j, out] : F::run(p, [&](auto& c) {
         std::vector<T> values(np * n);
         for (std::size_t k = 0; k < np; ++k)
           for (std::size_t e = 0; e < n; ++e)
             values[k * n + e] = static_cast<T>(100 * c.rank() + 10 * k + e);
         auto in = F::make(values);
         auto out = F::make(std::vector<T>(np * n, T(-1)));
         c.all_to_all(std::span<const T>(F::template view<T>(in)), F::template view<T>(out));
         return F::template read<T>(out);
       }))
    for (std::size_t i = 0; i < np; ++i)
      for (std::size_t e = 0; e < n; ++e)
        CHECK(out[i * n + e] == static_cast<T>(100 * i + 10 * static_cast<std::size_t>(j) + e));

  // broadcast: every rank gets the root's {7, 10, 13, ...}, from every root.
  for (int root = 0; root < p; ++root) {
    CAPTURE(root);
    for (const auto& [rank, data] : F::run(p, [&](auto& c) {
           auto data = F::make(c.rank() == root ? sequence_of<T>(n, T(7), T(3)) : std::vector<T>(n, T(-1)));
           c.broadcast(F::template view<T>(data), root);
           return F::template read<T>(data);
         }))
      CHECK(data == sequence_of<T>(n, T(7), T(3)));
  }

  // Empty buffers are valid and move nothing.
  const auto empties = F::run(p, [&](auto& c) {
    auto none = F::make(std::vector<T>{});
    const auto span = F::template view<T>(none);
    c.all_reduce(span);
    c.all_gather(std::span<const T>(span), span);
    c.reduce_scatter(std::span<const T>(span), span);
    c.all_to_all(std::span<const T>(span), span);
    c.broadcast(span, 0);
    return F::template read<T>(none).size();
  });
  for (const auto& [rank, size] : empties) CHECK(size == 0);
}

}  // namespace communicator_contract
