// libFuzzer entry point for config.json: the JSON parser and everything open_hf_model reads from the
// config (hf_config.hpp's readers, the tensors the config implies, the check of a checkpoint against
// them). Each input is written as the config.json of a small checkpoint directory, which is then
// opened. Any input must either open or throw shardgraph::error; a crash, a sanitizer report, a
// hang or any other exception is a bug. The test suite builds it with clang++ and runs it for
// SHARDGRAPH_FUZZ_SECONDS (ctest -R config_fuzz) from the golden config.json files and
// io/config_fuzz_seeds. By hand:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I include tests/io/config_fuzz.cpp
//   mkdir corpus; ./a.out -max_total_time=60 -max_len=4096 corpus tests/io/config_fuzz_seeds
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardgraph/io/hf_model.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/io/safetensors.hpp"

namespace {

// A checkpoint directory of a tiny GPT-2 (vocab 4, 1 position, n_embd 2, no layers) and LLaMA
// embedding: configs describing it open, the others fail the tensor check after being read.
struct scratch_checkpoint {
  std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("shardgraph-config-fuzz-" + std::to_string(::getpid()));
  scratch_checkpoint() {
    std::filesystem::create_directories(directory);
    const std::vector<float> table(8, 0.5f), row(2, 1.0f);
    shardgraph::io::write_safetensors(
        (directory / "model.safetensors").string(),
        {shardgraph::io::make_tensor_to_write("transformer.wte.weight", {4, 2}, table),
         shardgraph::io::make_tensor_to_write("transformer.wpe.weight", {1, 2}, row),
         shardgraph::io::make_tensor_to_write("transformer.ln_f.weight", {2}, row),
         shardgraph::io::make_tensor_to_write("transformer.ln_f.bias", {2}, row)});
  }
  ~scratch_checkpoint() {
    std::error_code ec;
    std::filesystem::remove_all(directory, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const scratch_checkpoint checkpoint;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    shardgraph::io::json::parse(text, "fuzz.json");
  } catch (const shardgraph::error&) {
  }
  std::ofstream(checkpoint.directory / "config.json", std::ios::binary | std::ios::trunc) << text;
  try {
    (void)shardgraph::io::open_hf_model(checkpoint.directory.string());
  } catch (const shardgraph::error&) {
  }
  return 0;
}
