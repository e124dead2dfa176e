// libFuzzer entry point for the safetensors reader and the JSON parser beneath it. Any input must
// either parse or throw shardgraph::error; a crash, a sanitizer report, a hang or any other
// exception is a bug. The test suite builds it with clang++ and runs it for SHARDGRAPH_FUZZ_SECONDS
// (ctest -R safetensors_fuzz) from the seeds in io/fuzz_seeds. By hand, for example:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I include tests/io/safetensors_fuzz.cpp
//   ./a.out -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "shardgraph/io/json.hpp"
#include "shardgraph/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    shardgraph::io::json::parse({reinterpret_cast<const char*>(data), size}, "fuzz.json");
  } catch (const shardgraph::error&) {
  }
  try {
    const auto* first = reinterpret_cast<const std::byte*>(data);
    const auto file = shardgraph::io::safetensors_file::from_bytes({first, first + size}, "fuzz.safetensors");
    for (const auto& t : file.tensors()) {
      (void)file.bytes(t.name);
      try {
        (void)file.read_as<double>(t.name);
        (void)file.read_as<float>(t.name);
        (void)file.read_as<std::int32_t>(t.name);
      } catch (const shardgraph::error&) {
      }
    }
    (void)file.info("no such tensor");
  } catch (const shardgraph::error&) {
  }
  return 0;
}
