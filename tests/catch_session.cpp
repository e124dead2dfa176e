// Catch2's session behind tests/catch_session.hpp. For the 2.x single header this translation unit
// is its implementation (CATCH_CONFIG_RUNNER), compiled once for every test program.
#include "catch_session.hpp"

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int shardgraph::testing::run_catch_session(int argc, char* argv[]) {
  return Catch::Session().run(argc, argv);
}
