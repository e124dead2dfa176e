#pragma once
// text(a, b, c): the pieces of an error message streamed into one string (g++ 12 has no <format>).
#include <sstream>
#include <string>

namespace shardgraph::cuda::detail {

template <class... Pieces>
std::string text(const Pieces&... pieces) {
  std::ostringstream out;
  (out << ... << pieces);
  return out.str();
}

}  // namespace shardgraph::cuda::detail
