#pragma once
// The Catch2 session, run from a main(): tests/catch_main.cpp (Catch2 2.x) and tests/gpu_main.cpp.
// Defined in tests/catch_session.cpp, which holds Catch2 2.x's implementation, compiled once.

namespace shardgraph::testing {

// Runs every test case linked into the program with the command line's options; returns the exit
// status (the number of failed tests, capped).
int run_catch_session(int argc, char* argv[]);

}  // namespace shardgraph::testing
