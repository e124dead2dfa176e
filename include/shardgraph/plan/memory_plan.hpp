#pragma once
// memory_plan: places values whose lifetimes do not overlap in the same bytes of one arena.
//
//   std::vector<memory_plan::value> v = {{.bytes = 4096, .live = {{0, 3}}},
//                                        {.bytes = 4096, .live = {{4, 9}}}};
//   memory_plan::placement p = memory_plan::place(v);   // both at offset 0, p.arena_bytes = 4096
//
// A value is live over one or more step ranges, both ends included: from the step that writes it
// to the last step that reads it (steps are the program's, in the order they run; a value read
// inside a loop is live to the loop's end), and again where a step writes it a second time
// (activation recomputation). Two values may share bytes only when no ranges of theirs meet.
//
// The placement is greedy by size: values are taken largest first (ties: earliest first) and each
// goes to the lowest offset, aligned, where it overlaps no placed value that is live at the same
// time. This is the classic offset assignment of static memory planners (TFLite's, XLA's heap
// simulator): within a few percent of the lower bound, the most bytes live at any one step, for
// the interval sets a transformer step makes. verify() checks a placement independently.
// Byte counts and offsets are checked sums: sizes past 64 bits are an error, never a wrapped offset.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"

namespace shardgraph::memory_plan {

struct steps {
  std::size_t first = 0, last = 0;  // [first, last]
};
struct value {
  std::size_t bytes = 0;
  std::vector<steps> live;
};

struct placement {
  std::vector<std::size_t> offsets;  // per value, in bytes from the arena's start
  std::size_t arena_bytes = 0;
};

// Offsets are multiples of this: the widest vector load (16 bytes) and cuBLASLt's preferred
// pointer alignment both divide it.
inline constexpr std::size_t alignment = 256;

inline std::size_t aligned(std::size_t bytes) {
  return checked_add_bytes(bytes, alignment - 1, "memory_plan: a value's bytes") / alignment * alignment;
}

inline bool live_together(const value& a, const value& b) {
  for (const steps& x : a.live)
    for (const steps& y : b.live)
      if (x.first <= y.last && y.first <= x.last) return true;
  return false;
}

// The most bytes live at one step: no placement can use a smaller arena.
inline std::size_t lower_bound(const std::vector<value>& values) {
  std::size_t end = 0;
  for (const value& v : values)
    for (const steps& r : v.live) end = std::max(end, r.last + 1);
  // live[] holds differences, wrapping modulo 2^64; its running sums are exact because the sum of
  // every range's bytes, `total`, fits.
  std::vector<std::size_t> live(end + 1, 0);
  std::size_t total = 0;
  for (const value& v : values)
    for (const steps& r : v.live) {
      total = checked_add_bytes(total, aligned(v.bytes), "memory_plan::lower_bound");
      live[r.first] += aligned(v.bytes);
      live[r.last + 1] -= aligned(v.bytes);
    }
  std::size_t now = 0, most = 0;
  for (std::size_t s = 0; s < end; ++s) most = std::max(most, now += live[s]);
  return most;
}

inline placement place(const std::vector<value>& values) {
  for (const value& v : values) {
    if (v.live.empty())
      fail("memory_plan::place", "a value is live at no step",
           "this is a bug in the memory plan's lifetimes (plan/arena.hpp); please report it");
    for (const steps& r : v.live)
      if (r.first > r.last)
        fail("memory_plan::place",
             "a value's last step " + std::to_string(r.last) + " is before its first " +
                 std::to_string(r.first),
             "this is a bug in the memory plan's lifetimes (plan/arena.hpp); please report it");
  }
  std::vector<std::size_t> order(values.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (values[a].bytes != values[b].bytes) return values[a].bytes > values[b].bytes;
    if (values[a].live.front().first != values[b].live.front().first)
      return values[a].live.front().first < values[b].live.front().first;
    return a < b;
  });
  placement p;
  p.offsets.assign(values.size(), 0);
  std::vector<std::size_t> placed;
  struct range {
    std::size_t begin, end;
  };
  std::vector<range> taken;
  for (std::size_t i : order) {
    taken.clear();
    for (std::size_t j : placed)
      if (live_together(values[i], values[j]))
        taken.push_back(
            {p.offsets[j], p.offsets[j] + aligned(values[j].bytes)});  // checked when j was placed
    std::sort(taken.begin(), taken.end(), [](const range& a, const range& b) { return a.begin < b.begin; });
    std::size_t offset = 0;
    const std::size_t need = aligned(values[i].bytes);
    for (const range& r : taken) {
      if (offset + need <= r.begin) break;  // fits in the gap before r (both terms below 2^63)
      offset = std::max(offset, r.end);
    }
    p.offsets[i] = offset;
    p.arena_bytes = std::max(p.arena_bytes, checked_add_bytes(offset, need, "memory_plan::place: the arena"));
    placed.push_back(i);
  }
  return p;
}

// Fails, naming the two values, if values live at the same time overlap in the arena or a value
// leaves it. plan_arena (plan/arena.hpp) calls it on every placement it makes.
inline void verify(const std::vector<value>& values, const placement& p) {
  constexpr auto where = "memory_plan::verify";
  const auto bug =
      "this is a bug in memory_plan::place; please report it (bind(..., {.reuse = false}) avoids it)";
  if (p.offsets.size() != values.size()) fail(where, "the placement does not cover every value", bug);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (p.offsets[i] % alignment != 0 || p.offsets[i] + values[i].bytes > p.arena_bytes)
      fail(where, "value " + std::to_string(i) + " is misaligned or leaves the arena", bug);
    for (std::size_t j = i + 1; j < values.size(); ++j) {
      if (!live_together(values[i], values[j]) || values[i].bytes == 0 || values[j].bytes == 0) continue;
      const bool apart =
          p.offsets[i] + values[i].bytes <= p.offsets[j] || p.offsets[j] + values[j].bytes <= p.offsets[i];
      if (!apart)
        fail(where,
             "values " + std::to_string(i) + " and " + std::to_string(j) + " are live together and overlap",
             bug);
    }
  }
}

}  // namespace shardgraph::memory_plan
