#pragma once
// A fixed-capacity vector usable in constant evaluation and as a structural template argument
// (all members public, no pointers). Overflow is a clear error, at compile time or run time.
#include <cstddef>

#include "shardgraph/core/constexpr_fail.hpp"

namespace shardgraph {

template <class T, std::size_t Capacity>
struct static_vector {
  T items[Capacity]{};
  std::size_t count = 0;

  static constexpr std::size_t capacity() { return Capacity; }
  constexpr std::size_t size() const { return count; }
  constexpr bool empty() const { return count == 0; }
  constexpr T& operator[](std::size_t i) { return items[i]; }
  constexpr const T& operator[](std::size_t i) const { return items[i]; }
  constexpr T& back() { return items[count - 1]; }
  constexpr const T& back() const { return items[count - 1]; }
  constexpr T* begin() { return items; }
  constexpr T* end() { return items + count; }
  constexpr const T* begin() const { return items; }
  constexpr const T* end() const { return items + count; }

  constexpr void push_back(const T& value) {
    if (count == Capacity) constexpr_fail("shardgraph: static_vector: capacity exceeded. raise the capacity constant named in the error trace");
    items[count++] = value;
  }
  constexpr void pop_back() { --count; }
  friend constexpr bool operator==(const static_vector& a, const static_vector& b) {
    if (a.count != b.count) return false;
    for (std::size_t i = 0; i < a.count; ++i)
      if (!(a.items[i] == b.items[i])) return false;
    return true;
  }
};

}  // namespace shardgraph
