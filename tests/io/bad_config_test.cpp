// config.json files with zero, negative, absurd and inconsistent sizes, written at test time: each
// is refused by name (the file and the field) before anything is computed from it.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <shardgraph/io/hf_config.hpp>
#include <shardgraph/io/hf_model.hpp>

#include "catch.hpp"
#include "random_hf_checkpoint.hpp"

namespace sg = shardgraph;
namespace io = shardgraph::io;

namespace {

// The test's files, removed when it ends.
struct scratch_directory {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("shardgraph-bad-config-" + std::to_string(::getpid()));
  ~scratch_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

// A small random checkpoint of `family`, written once per test run.
std::string checkpoint(const std::string& family) {
  static const scratch_directory scratch;
  const std::filesystem::path dir = scratch.path / family;
  if (!std::filesystem::exists(dir / "config.json")) {
    std::filesystem::create_directories(dir);
    sg::examples::write_random_hf_checkpoint(dir.string(), {.family = family,
                                                            .vocab = 64,
                                                            .model = 16,
                                                            .layers = 1,
                                                            .heads = 2,
                                                            .kv_heads = 2,
                                                            .ffn = 32,
                                                            .positions = 16});
  }
  return dir.string();
}

// The checkpoint's config.json text with "key"'s value replaced by `value` (added if absent).
std::string with_field(std::string text, const std::string& key, const std::string& value) {
  const std::string quoted = "\"" + key + "\": ";
  if (const std::size_t at = text.find(quoted); at != std::string::npos) {
    const std::size_t begin = at + quoted.size();
    const std::size_t end = text.find_first_of(",\n", begin);
    return text.replace(begin, end - begin, value);
  }
  return text.replace(text.find('{') + 1, 0, "\n  " + quoted + value + ",");
}

struct config_case {
  std::string key, value, expected;
};

// open_hf_model on a copy of the family's checkpoint whose config.json has the case's field.
std::string open_error(const std::string& family, const std::string& config_text) {
  const std::string dir = checkpoint(family) + "-edited";
  std::filesystem::create_directories(dir);
  std::filesystem::copy(
      checkpoint(family), dir,
      std::filesystem::copy_options::overwrite_existing | std::filesystem::copy_options::recursive);
  std::ofstream(dir + "/config.json", std::ios::trunc) << config_text;
  try {
    io::open_hf_model(dir);
  } catch (const sg::error& e) {
    return e.what();
  }
  return "";
}

std::string config_text(const std::string& family) {
  std::ifstream in(checkpoint(family) + "/config.json");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("hf config: the unedited checkpoints open", "[io][sizes]") {
  CHECK(open_error("gpt2", config_text("gpt2")).empty());
  CHECK(open_error("llama", config_text("llama")).empty());
}

TEST_CASE("hf config: GPT-2 sizes that are zero, negative, absurd or inconsistent name the field",
          "[io][sizes]") {
  const config_case cases[] = {
      {"vocab_size", "0", "config.json: vocab_size: 0 is not a positive size"},
      {"vocab_size", "-5", "config.json: vocab_size: -5 is not a positive size"},
      {"vocab_size", "4611686018427387904",
       "config.json: vocab_size: 4611686018427387904 is larger than any model's"},
      {"n_embd", "0", "config.json: n_embd: 0 is not a positive size"},
      {"n_head", "0", "config.json: n_head: 0 is not a positive size"},
      {"n_head", "5", "config.json: n_head: 5 does not divide n_embd = 16"},
      {"n_layer", "-1", "config.json: n_layer: -1 is not a positive size"},
      {"n_positions", "0", "config.json: n_positions: 0 is not a positive size"},
      {"n_inner", "0", "config.json: n_inner: 0 is not a positive size"},
  };
  for (const config_case& c : cases) {
    CAPTURE(c.key, c.value);
    CHECK_THAT(open_error("gpt2", with_field(config_text("gpt2"), c.key, c.value)),
               Catch::Contains(c.expected));
  }
  // 2^30 x 2^30 elements of 8 bytes pass 64 bits: the table's fields are named.
  const std::string huge = with_field(
      with_field(with_field(config_text("gpt2"), "vocab_size", "1073741824"), "n_embd", "1073741824"),
      "n_head", "1");
  CHECK_THAT(open_error("gpt2", huge), Catch::Contains("config.json: vocab_size * n_embd") &&
                                           Catch::Contains("does not fit in 64 bits"));
}

TEST_CASE("hf config: LLaMA sizes that are zero, negative, absurd or inconsistent name the field",
          "[io][sizes]") {
  const std::string llama = config_text("llama");
  const config_case cases[] = {
      {"vocab_size", "0", "config.json: vocab_size: 0 is not a positive size"},
      {"hidden_size", "-16", "config.json: hidden_size: -16 is not a positive size"},
      {"intermediate_size", "0", "config.json: intermediate_size: 0 is not a positive size"},
      {"num_attention_heads", "0", "config.json: num_attention_heads: 0 is not a positive size"},
      {"num_key_value_heads", "3",
       "config.json: num_key_value_heads: 3 does not divide num_attention_heads = 2"},
      {"num_hidden_layers", "0", "config.json: num_hidden_layers: 0 is not a positive size"},
      {"max_position_embeddings", "-1", "config.json: max_position_embeddings: -1 is not a positive size"},
      {"head_dim", "0", "config.json: head_dim: 0 is not a positive size"},
      {"num_hidden_layers", "9223372036854775807",
       "config.json: num_hidden_layers: 9223372036854775807 is larger"},
  };
  for (const config_case& c : cases) {
    CAPTURE(c.key, c.value);
    CHECK_THAT(open_error("llama", with_field(llama, c.key, c.value)), Catch::Contains(c.expected));
  }
  // Without head_dim, the heads must divide the hidden size.
  const std::string no_head_dim =
      with_field(with_field(llama, "head_dim", "null"), "num_attention_heads", "3");
  CHECK_THAT(open_error("llama", with_field(no_head_dim, "num_key_value_heads", "3")),
             Catch::Contains("config.json: num_attention_heads: 3 does not divide hidden_size = 16"));
  // The readers refuse the same before the model is built.
  const std::string path = checkpoint("llama") + "-edited/config.json";
  std::ofstream(path, std::ios::trunc) << with_field(llama, "vocab_size", "0");
  CHECK_THROWS_WITH(io::hf_llama_config(path), Catch::Contains("vocab_size: 0 is not a positive size"));
}
