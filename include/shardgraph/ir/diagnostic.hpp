#pragma once
// The first error found while building or transforming a graph, kept as a value so that
// compile() can report it at compile time with the node's name (see passes/compile.hpp).
#include <cstddef>
#include <string_view>

namespace shardgraph {

struct diagnostic {
  static constexpr std::size_t capacity = 400;
  char text[capacity]{};

  constexpr bool empty() const { return text[0] == '\0'; }
  constexpr std::string_view view() const {
    std::size_t n = 0;
    while (n < capacity && text[n] != '\0') ++n;
    return {text, n};
  }
  // Appends, truncating silently: a long message is still better than none.
  constexpr diagnostic& operator<<(std::string_view part) {
    std::size_t n = view().size();
    for (std::size_t i = 0; i < part.size() && n + 1 < capacity; ++i) text[n++] = part[i];
    return *this;
  }
  constexpr diagnostic& operator<<(int value) {
    char digits[12]{};
    int len = 0;
    bool negative = value < 0;
    unsigned v = negative ? 0u - static_cast<unsigned>(value) : static_cast<unsigned>(value);
    do { digits[len++] = static_cast<char>('0' + v % 10); v /= 10; } while (v != 0);
    if (negative) *this << "-";
    for (int i = len - 1; i >= 0; --i) *this << std::string_view(&digits[i], 1);
    return *this;
  }
};

}  // namespace shardgraph
