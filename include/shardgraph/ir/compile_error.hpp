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
// clang (14) prints the same argument as numbers ({{115, 104, 97, ...}}) but a pack of characters
// as characters, so under clang the text is spelled out as one:
//   error: implicit instantiation of undefined template 'shardgraph::shardgraph_compile_error_text<
//     's', 'h', 'a', 'r', 'd', 'g', 'r', 'a', 'p', 'h', ':', ' ', 'l', 'i', 'n', 'e', 'a', 'r', ...>'
template <diagnostic Message>
struct shardgraph_compile_error;
template <char... Text>
struct shardgraph_compile_error_text;

namespace detail {
template <diagnostic Message, class Indices = std::make_index_sequence<Message.view().size()>>
struct spelled_compile_error;
template <diagnostic Message, std::size_t... I>
struct spelled_compile_error<Message, std::index_sequence<I...>> {
  using type = shardgraph_compile_error_text<Message.text[I]...>;
};
}  // namespace detail

template <diagnostic Message>
consteval bool report_compile_error() {
  if constexpr (!Message.empty()) {
#if defined(__clang__)
    return sizeof(typename detail::spelled_compile_error<Message>::type) == 0;
#else
    return sizeof(shardgraph_compile_error<Message>) == 0;
#endif
  }
  return true;
}

}  // namespace shardgraph
