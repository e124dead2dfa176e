// main() for the Catch2 2.x single header; Catch2 3.x links Catch2::Catch2WithMain instead.
#include "catch_session.hpp"

int main(int argc, char* argv[]) { return shardgraph::testing::run_catch_session(argc, argv); }
