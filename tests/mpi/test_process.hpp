#pragma once
// One process of an MPI test executable: MPI is initialized before Catch runs the tests and
// finalized after; ranks other than 0 hold back Catch's report unless it shows a failure.
// Include from exactly one translation unit of each MPI test executable.
#include <iostream>
#include <sstream>
#include <streambuf>
#include <string>

#include "shardgraph/mpi.hpp"

namespace mpi_test {

// MPI must be initialized before Catch runs the tests and finalized after. main() is not this file's
// (tests/catch_main.cpp for Catch2 2.x, Catch2WithMain for 3.x), so a namespace-scope object does it
// for both versions: it is constructed during static initialization, before main(), and destroyed
// after main() returns, when Catch has finished. It touches only MPI, so the order of other
// translation units' statics does not matter.
//
// Ranks other than 0 hold Catch's report, which both Catch2 versions write to std::cout through a
// stream made from std::cout's buffer when the run starts. At exit they print it only if it does not
// say that all tests passed: one report per run, plus the report of any rank that failed.
class test_process {
 public:
  test_process() {
    if (world_.rank() != 0) previous_ = std::cout.rdbuf(held_.rdbuf());
  }
  test_process(const test_process&) = delete;
  test_process& operator=(const test_process&) = delete;
  ~test_process() {
    if (previous_ == nullptr) return;
    std::cout.rdbuf(previous_);
    const std::string report = held_.str();
    if (report.find("All tests passed") == std::string::npos) {
      std::cout << "[rank " << world_.rank() << "]\n" << report << std::flush;
    }
  }
  const shardgraph::mpi::world& world() const { return world_; }

 private:
  shardgraph::mpi::world world_;
  std::ostringstream held_;
  std::streambuf* previous_ = nullptr;
};

inline test_process process;

}  // namespace mpi_test
