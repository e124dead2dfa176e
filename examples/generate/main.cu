// generate_cuda: examples/generate (main.cpp: every option) on the GPU. The ranks compute on the
// cuda backend, as thread ranks that share the visible GPUs through managed memory; with
// --max-memory, each of the map's stages on its device: cuda:N on GPU N, the cpu's on the cpu
// backend, the activations crossing between them as between any pipeline stages.
//
//   generate_cuda DIR --prompt-ids 1,2,3 --max-memory cuda:0=2GiB,cpu=16GiB --print-ids
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include <shardgraph/cpu.hpp>
#include <shardgraph/cuda/backend.hpp>

#include "generate_cli.hpp"

namespace {

// Each visible GPU's total memory, by index (what --max-memory's shares are taken of).
std::vector<std::int64_t> gpu_totals() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return {};
  std::vector<std::int64_t> totals;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, i) == cudaSuccess)
      totals.push_back(static_cast<std::int64_t>(properties.totalGlobalMem));
  }
  return totals;
}

}  // namespace

int main(int argc, char** argv) {
  using gpu_llm = gen::llm<sg::cuda::backend, sg::threads::world, sg::cpu::backend>;
  return generate_cli::generate_main(
      argc, argv, gpu_totals(), [](const generate_cli::options& o, const device_placement& placement) {
        // A stage's GPU: the map's, or the current device without a map.
        auto on_gpu = [gpus = placement.gpu_of_stage](int stage) {
          const int device = gpus.empty() ? -1 : gpus[static_cast<std::size_t>(stage)];
          return sg::cuda::backend{{.host_visible = true, .device = device}};
        };
        return gpu_llm(o.directory, o.llm, sg::text::open_tokenizer_codec(o.directory), on_gpu);
      });
}
