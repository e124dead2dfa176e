// main() for the Catch2 2.x single header; Catch2 3.x links Catch2::Catch2WithMain instead.
#if __has_include(<catch2/catch_all.hpp>)
// nothing: Catch2WithMain provides main()
#else
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#endif
