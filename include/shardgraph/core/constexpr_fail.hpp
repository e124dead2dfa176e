#pragma once
// Failing from code that runs both at compile time and at run time.
// In a constant evaluation the `throw` stops compilation and both g++ and nvcc quote the caller's
// line, which holds the literal message; at run time the same message arrives as shardgraph::error.
#include <type_traits>

#include "shardgraph/core/error.hpp"

namespace shardgraph {

// A template so that compilers do not reject it for never being a constant expression.
template <class = void>
[[noreturn]] constexpr void constexpr_fail(const char* message) {
  if (std::is_constant_evaluated()) throw message;
  throw error(message);
}

}  // namespace shardgraph
