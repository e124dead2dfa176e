#pragma once
// The sizes of a HF config.json, checked before any arithmetic on them: each a positive integer no
// larger than max_config_size, the head count dividing the hidden size (and the key/value head
// count dividing the head count), and the weight tables' bytes within 64 bits. Each error names
// the file and the field:
//
//   shardgraph: gpt2/config.json: vocab_size: 0 is not a positive size. give the model's vocab_size ...
#include <cstdint>
#include <string>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/io/json.hpp"

namespace shardgraph::io {

// No model any device holds has a dimension this large; below it, the product of two sizes and a
// dtype's bytes cannot pass 64 bits unless both are very large (checked apart).
inline constexpr std::int64_t max_config_size = (std::int64_t{1} << 31) - 1;

namespace detail {

// config[key] as a size in [1, max_config_size].
inline std::int64_t config_size(const std::string& path, const json::value& config, const std::string& key) {
  const std::int64_t v = config.at(key).as_int();
  if (v <= 0)
    fail(path + ": " + key, std::to_string(v) + " is not a positive size",
         "give the model's " + key + " (a positive integer), as save_pretrained writes it");
  if (v > max_config_size)
    fail(path + ": " + key,
         std::to_string(v) + " is larger than any model's (at most " + std::to_string(max_config_size) + ")",
         "check the value; the file may be damaged or not a model's config.json");
  return v;
}

// An optional size: absent or null gives `otherwise`.
inline std::int64_t optional_config_size(const std::string& path, const json::value& config,
                                         const std::string& key, std::int64_t otherwise) {
  const json::value* v = config.find(key);
  return v == nullptr || v->is_null() ? otherwise : config_size(path, config, key);
}

inline void expect_divides(const std::string& path, const std::string& part_key, std::int64_t part,
                           const std::string& whole_key, std::int64_t whole) {
  if (whole % part != 0)
    fail(path + ": " + part_key,
         std::to_string(part) + " does not divide " + whole_key + " = " + std::to_string(whole),
         "choose " + part_key + " dividing " + whole_key + ", as transformers requires");
}

// a_key * b_key elements of 8 bytes (the widest dtype) fit in 64 bits.
inline void expect_table_fits(const std::string& path, const std::string& a_key, std::int64_t a,
                              const std::string& b_key, std::int64_t b) {
  checked_multiply(checked_multiply(a, b, path + ": " + a_key + " * " + b_key), 8,
                   path + ": " + a_key + " * " + b_key + " (bytes of the weight)");
}

}  // namespace detail

// The sizes of a GPT-2 config.json (vocab_size, n_positions, n_embd, n_head, n_layer, n_inner).
inline void check_gpt2_config_sizes(const std::string& path, const json::value& c) {
  using namespace detail;
  const std::int64_t vocab = config_size(path, c, "vocab_size"),
                     positions = config_size(path, c, "n_positions");
  const std::int64_t model = config_size(path, c, "n_embd"), heads = config_size(path, c, "n_head");
  config_size(path, c, "n_layer");
  optional_config_size(path, c, "n_inner", 1);
  expect_divides(path, "n_head", heads, "n_embd", model);
  expect_table_fits(path, "vocab_size", vocab, "n_embd", model);
  expect_table_fits(path, "n_positions", positions, "n_embd", model);
  expect_table_fits(path, "n_embd", model, "4 * n_embd", checked_multiply(4, model, path + ": n_embd"));
}

// The sizes of a LLaMA config.json (vocab_size, hidden_size, intermediate_size,
// num_attention_heads, num_key_value_heads, num_hidden_layers, max_position_embeddings, head_dim).
inline void check_llama_config_sizes(const std::string& path, const json::value& c) {
  using namespace detail;
  const std::int64_t vocab = config_size(path, c, "vocab_size"), model = config_size(path, c, "hidden_size");
  const std::int64_t ffn = config_size(path, c, "intermediate_size");
  const std::int64_t heads = config_size(path, c, "num_attention_heads");
  const std::int64_t kv_heads = optional_config_size(path, c, "num_key_value_heads", heads);
  config_size(path, c, "num_hidden_layers");
  optional_config_size(path, c, "max_position_embeddings", 1);
  const std::int64_t head_dim = optional_config_size(path, c, "head_dim", 0);
  if (head_dim == 0) expect_divides(path, "num_attention_heads", heads, "hidden_size", model);
  expect_divides(path, "num_key_value_heads", kv_heads, "num_attention_heads", heads);
  expect_table_fits(path, "vocab_size", vocab, "hidden_size", model);
  expect_table_fits(path, "intermediate_size", ffn, "hidden_size", model);
  if (head_dim != 0)
    expect_table_fits(path, "num_attention_heads * head_dim",
                      checked_multiply(heads, head_dim, path + ": head_dim"), "hidden_size", model);
}

}  // namespace shardgraph::io
