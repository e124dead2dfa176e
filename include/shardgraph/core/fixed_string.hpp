#pragma once
// Compile-time strings: `fixed_string` carries an axis name as a template argument
// (`mesh<"dp", "tp">`, `on<"tp">(...)`); `name_buffer` holds a node's name inside constexpr IR
// values, where std::string cannot live across constant evaluations.
#include <cstddef>
#include <string_view>

#include "shardgraph/core/constexpr_fail.hpp"

namespace shardgraph {

template <std::size_t N>
struct fixed_string {
  char chars[N]{};
  constexpr fixed_string(const char (&text)[N]) {
    for (std::size_t i = 0; i < N; ++i) chars[i] = text[i];
  }
  constexpr std::string_view view() const { return {chars, N - 1}; }
};

// A bounded, NUL-terminated name. Longer names are a build-time error in `assign`.
struct name_buffer {
  static constexpr std::size_t capacity = 56;
  char chars[capacity]{};

  constexpr name_buffer() = default;
  constexpr name_buffer(std::string_view text) { assign(text); }
  template <std::size_t N>
  constexpr name_buffer(const char (&text)[N]) {
    assign(std::string_view(text, N - 1));
  }

  constexpr void assign(std::string_view text) {
    if (text.size() >= capacity) constexpr_fail("shardgraph: name_buffer: a node name is longer than 55 characters. use a shorter name");
    std::size_t i = 0;
    for (; i < text.size(); ++i) chars[i] = text[i];
    for (; i < capacity; ++i) chars[i] = '\0';
  }
  constexpr void append(std::string_view text) {
    std::size_t n = size();
    if (n + text.size() >= capacity) constexpr_fail("shardgraph: name_buffer: a node name is longer than 55 characters. use a shorter name");
    for (std::size_t i = 0; i < text.size(); ++i) chars[n + i] = text[i];
  }
  constexpr std::size_t size() const {
    std::size_t n = 0;
    while (n < capacity && chars[n] != '\0') ++n;
    return n;
  }
  constexpr bool empty() const { return chars[0] == '\0'; }
  constexpr std::string_view view() const { return {chars, size()}; }
  friend constexpr bool operator==(const name_buffer& a, const name_buffer& b) { return a.view() == b.view(); }
};

}  // namespace shardgraph
