#pragma once
// report_compile_error<Message>(): stops compilation with a diagnostic's text spelled out in the
// compiler's message (compile() reports a graph's first error by it; custom_op_of a malformed
// sharding rule).
#include <cstddef>
#include <utility>

#include "shardgraph/ir/diagnostic.hpp"

namespace shardgraph {

// Never defined: naming one with the diagnostic's text makes the compiler print the text.
// g++ prints a class-type template argument's characters as a string:
//   error: invalid application of 'sizeof' to incomplete type 'shardgraph::shardgraph_compile_error<
//     shardgraph::diagnostic{"shardgraph: linear 'c_fc': the input's last dimension ..."}>'
// clang 19 prints a character array as a string too, but cuts it after about 32 characters, so
// under clang 19 and later the text comes in pieces of 31 (the last one padded with spaces):
//   error: implicit instantiation of undefined template 'shardgraph::shardgraph_compile_error_pieces<
//     shardgraph::text_piece{"shardgraph: linear \'c_fc\': the "}, shardgraph::text_piece{"input..."}, ...>'
// Older clang prints a character array as numbers but a pack of characters as characters, so it
// gets the text as one:
//   error: implicit instantiation of undefined template 'shardgraph::shardgraph_compile_error_text<
//     's', 'h', 'a', 'r', 'd', 'g', 'r', 'a', 'p', 'h', ':', ' ', 'l', 'i', 'n', 'e', 'a', 'r', ...>'
template <diagnostic Message>
struct shardgraph_compile_error;
template <char... Text>
struct shardgraph_compile_error_text;

// 31 characters of a message and the terminating NUL, the most clang prints of one in full.
struct text_piece {
  static constexpr std::size_t length = 31;
  char text[length + 1]{};
};
template <text_piece... Pieces>
struct shardgraph_compile_error_pieces;

namespace detail {
template <diagnostic Message, class Indices = std::make_index_sequence<Message.view().size()>>
struct spelled_compile_error;
template <diagnostic Message, std::size_t... I>
struct spelled_compile_error<Message, std::index_sequence<I...>> {
  using type = shardgraph_compile_error_text<Message.text[I]...>;
};

// Piece k of the message: its characters from k * 31 on, spaces past its end.
constexpr text_piece message_piece(const diagnostic& message, std::size_t k) {
  const std::string_view text = message.view();
  text_piece piece;
  for (std::size_t i = 0; i < text_piece::length; ++i) {
    const std::size_t at = k * text_piece::length + i;
    piece.text[i] = at < text.size() ? text[at] : ' ';
  }
  return piece;
}
template <diagnostic Message,
          class Indices = std::make_index_sequence<(Message.view().size() + text_piece::length - 1) / text_piece::length>>
struct pieced_compile_error;
template <diagnostic Message, std::size_t... K>
struct pieced_compile_error<Message, std::index_sequence<K...>> {
  using type = shardgraph_compile_error_pieces<message_piece(Message, K)...>;
};
}  // namespace detail

template <diagnostic Message>
consteval bool report_compile_error() {
  if constexpr (!Message.empty()) {
#if defined(__clang__) && __clang_major__ >= 19
    return sizeof(typename detail::pieced_compile_error<Message>::type) == 0;
#elif defined(__clang__)
    return sizeof(typename detail::spelled_compile_error<Message>::type) == 0;
#else
    return sizeof(shardgraph_compile_error<Message>) == 0;
#endif
  }
  return true;
}

}  // namespace shardgraph
