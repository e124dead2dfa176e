#pragma once
// One include for Catch2 2.x (Debian 12: single header) and Catch2 3.x (Ubuntu 24.04: split headers),
// so every test builds with both. The main() comes from tests/catch_main.cpp.
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define SHARDGRAPH_CATCH3 1
#else
#include <catch2/catch.hpp>
#endif

// Catch2 2.x names the floating-point matcher differently.
#if defined(SHARDGRAPH_CATCH3)
using Catch::Approx;
#endif

#include <string>
#include <string_view>

#include <shardgraph/core/error.hpp>

// Helpers every test layer uses.
namespace shardgraph::testing {

#if defined(SHARDGRAPH_CATCH3)
using Catch::Matchers::ContainsSubstring;
#else
inline auto ContainsSubstring(const std::string& s) { return Catch::Matchers::Contains(s); }
#endif

// The message of the shardgraph::error that f() throws, or "(no error)".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const shardgraph::error& e) {
    return e.what();
  }
  return "(no error)";
}

inline bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

}  // namespace shardgraph::testing
