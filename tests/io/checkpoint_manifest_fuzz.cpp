// libFuzzer entry point for the training-checkpoint manifest reader (shardgraph-checkpoint.json):
// parse_checkpoint_manifest and, where it holds a state, parse_training_state. Any input must either
// parse into values within their documented ranges or throw shardgraph::error; a crash, a sanitizer
// report, a hang or any other exception is a bug. The test suite builds it with clang++ and runs it
// for SHARDGRAPH_FUZZ_SECONDS (ctest -R checkpoint_manifest_fuzz) from the seeds in
// io/fuzz_seeds/checkpoint_manifest. By hand, for example:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I include
//   tests/io/checkpoint_manifest_fuzz.cpp
//   ./a.out -max_total_time=60 tests/io/fuzz_seeds/checkpoint_manifest
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "shardgraph/io/checkpoint_manifest.hpp"
#include "shardgraph/io/training_checkpoint.hpp"

namespace io = shardgraph::io;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const io::checkpoint_manifest m =
        io::parse_checkpoint_manifest({reinterpret_cast<const char*>(data), size}, "fuzz.json");
    // what the reader promises of a manifest it accepts
    if (m.ranks < 1 || m.ranks > io::max_checkpoint_ranks) std::abort();
    if (m.checked && m.files.size() != static_cast<std::size_t>(m.ranks)) std::abort();
    for (const auto& [name, check] : m.files)
      if (check.bytes < 8) std::abort();
    if (!m.state.is_null()) {
      const io::training_state t = io::parse_training_state(m.state, "fuzz.json");
      if (t.steps < 0 || t.updates < 0 || t.updates > t.steps || t.data.position < 0 || t.data.epoch < 0)
        std::abort();
      t.loss_scaler.check();  // accepted values are usable: this must not throw
    }
  } catch (const shardgraph::error&) {
  }
  return 0;
}
