#pragma once
// shardgraph::error: the one exception type of the library.
// Every message reads "shardgraph: <where>: <why>. <how to fix>" so that it is easy to spot
// in a long log and tells the user what to change.
#include <stdexcept>
#include <string>
#include <string_view>

namespace shardgraph {

class error : public std::runtime_error {
 public:
  explicit error(const std::string& message) : std::runtime_error(message) {}
};

// Composes "shardgraph: where: why. how" (the trailing period of `why` is added here).
inline std::string error_message(std::string_view where, std::string_view why, std::string_view how) {
  std::string m = "shardgraph: ";
  m += where;
  m += ": ";
  m += why;
  m += ". ";
  m += how;
  return m;
}

[[noreturn]] inline void fail(std::string_view where, std::string_view why, std::string_view how) {
  throw error(error_message(where, why, how));
}

}  // namespace shardgraph
