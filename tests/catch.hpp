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
