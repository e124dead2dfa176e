// load_hf bench on the GPU: loads a HF GPT-2 or LLaMA checkpoint directory onto the GPU with
// cuda::backend (each rank reads only its slices; uploads go through pinned staging) and prints one
// JSON line per load (load_bench.hpp says what it holds and the options).
//
//   load_hf DIR [--mesh tp=1] [--dtype bf16|f32] [--ids 1,2,3] [--logits FILE] [--repeat N]
//
// --mesh tp=N runs N thread ranks that share the one GPU (managed memory, as the threads
// communicator needs). device_gib is the GPU memory the loads took (cudaMemGetInfo).
#include <shardgraph/cuda/backend.hpp>

#include <cstddef>

#include "load_bench.hpp"

namespace {

struct cuda_device {
  static constexpr const char* name = "cuda";
  static constexpr const char* program = "load_hf";
  static shardgraph::cuda::backend make(int ranks) {
    return shardgraph::cuda::backend({.host_visible = ranks > 1});  // the threads communicator reads it
  }
  static void synchronize(shardgraph::cuda::backend& gpu) { gpu.synchronize(); }
  static std::size_t used_bytes() {
    std::size_t free = 0, total = 0;
    shardgraph::cuda::check_cuda(cudaMemGetInfo(&free, &total), "load_hf (cudaMemGetInfo)");
    return total - free;
  }
};

}  // namespace

int main(int argc, char** argv) { return load_bench::bench_main<cuda_device>(argc, argv); }
