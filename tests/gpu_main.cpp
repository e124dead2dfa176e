// main() for the tests labelled gpu. Without a CUDA device (no GPU, no driver) it returns 77, which
// CTest's SKIP_RETURN_CODE (set by shardgraph_add_test, cmake/shardgraph_testing.cmake) reports as
// "Skipped": the GPU tests are compiled everywhere and run where a GPU is present.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "catch_session.hpp"

namespace {
constexpr int skip_return_code = 77;
}

int main(int argc, char* argv[]) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("shardgraph: gpu test skipped: no CUDA device visible (%s)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    return skip_return_code;
  }
  return shardgraph::testing::run_catch_session(argc, argv);
}
