// load_hf bench on the CPU: loads a HF GPT-2 or LLaMA checkpoint directory into host memory with
// cpu::backend on thread ranks (each rank reads only its slices) and prints one JSON line per load
// (load_bench.hpp says what it holds and the options). The same measurement as load_hf (main.cu),
// for machines without a GPU, and what bench/load_hf/compare_hf.py --device cpu runs.
//
//   load_hf_cpu DIR [--mesh tp=1] [--dtype bf16|f32] [--ids 1,2,3] [--logits FILE] [--repeat N]
//
// device_gib is the growth of the process's anonymous resident memory (RssAnon) over the loads:
// the weight buffers of every rank. The mapped checkpoint pages are file-backed and not counted.
#include <shardgraph/cpu.hpp>

#include <cstddef>
#include <fstream>
#include <string>

#include "load_bench.hpp"

namespace {

struct cpu_device {
  static constexpr const char* name = "cpu";
  static constexpr const char* program = "load_hf_cpu";
  static shardgraph::cpu::backend make(int) { return {}; }
  static void synchronize(shardgraph::cpu::backend&) {}  // upload is a memcpy: done when it returns
  static std::size_t used_bytes() {                      // /proc/self/status "RssAnon:  123456 kB"
    std::ifstream status("/proc/self/status");
    for (std::string key; status >> key;) {
      if (key == "RssAnon:") {
        std::size_t kib = 0;
        status >> kib;
        return kib * 1024;
      }
      status.ignore(1 << 12, '\n');
    }
    return 0;  // not Linux: device_gib reads 0
  }
};

}  // namespace

int main(int argc, char** argv) { return load_bench::bench_main<cpu_device>(argc, argv); }
