#pragma once
// HF config.json import for the GPT-2 and LLaMA families: the sizes bind needs, and the
// compile-time constants (eps, rope theta, activation) checked against the compiled model. The
// sizes are checked (hf_config_sizes.hpp) before anything is computed from them.
#include <fstream>
#include <sstream>
#include <string>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/file_contents.hpp"
#include "shardgraph/io/hf_config_sizes.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/models/gpt2.hpp"
#include "shardgraph/models/llama.hpp"

namespace shardgraph::io {

// The JSON in the file at `path`; a FIFO, a device or a directory is refused, not waited on.
inline json::value read_json_file(const std::string& path) {
  const file_contents text = file_contents::open(path);
  return json::parse({reinterpret_cast<const char*>(text.bytes().data()), text.bytes().size()}, path);
}

namespace detail {
inline void expect_value(const std::string& path, const char* key, double in_file, double compiled) {
  if (in_file != compiled)
    fail(path + ": " + key, "the checkpoint says " + std::to_string(in_file) + " but the program was compiled with " +
                                std::to_string(compiled),
         "compile the model with the checkpoint's value (see the model's options)");
}
inline void expect_model_type(const std::string& path, const json::value& c, const char* type) {
  if (const json::value* t = c.find("model_type"); t && t->as_string() != type)
    fail(path, "model_type is \"" + t->as_string() + "\", not \"" + type + "\"", std::string("load a ") + type + " checkpoint");
}
}  // namespace detail

// Reads a GPT-2 config.json; checks eps and the activation against `compiled`.
inline models::gpt2_config hf_gpt2_config(const std::string& path, const models::gpt2_options& compiled = {}) {
  json::value c = read_json_file(path);
  detail::expect_model_type(path, c, "gpt2");
  check_gpt2_config_sizes(path, c);
  if (const json::value* act = c.find("activation_function"); act && act->as_string() != "gelu_new")
    fail(path + ": activation_function", "\"" + act->as_string() + "\" is not supported", "use \"gelu_new\" (GPT-2's tanh GELU)");
  std::int64_t four_embd = 0;  // 4 * n_embd, which an n_embd from the file may overflow
  if (const json::value* inner = c.find("n_inner");
      inner && !inner->is_null() &&
      (__builtin_mul_overflow(std::int64_t{4}, c.at("n_embd").as_int(), &four_embd) ||
       inner->as_int() != four_embd))
    fail(path + ": n_inner", "the MLP width is not 4 * n_embd", "the gpt2 model has an MLP of 4 * n_embd");
  detail::expect_value(path, "layer_norm_epsilon", c.at("layer_norm_epsilon").as_double(), compiled.layer_norm_eps);
  return {.vocab = c.at("vocab_size").as_int(), .positions = c.at("n_positions").as_int(), .model = c.at("n_embd").as_int(),
          .heads = c.at("n_head").as_int(), .layers = c.at("n_layer").as_int()};
}

// Reads a LLaMA config.json; checks eps and rope theta against `compiled`.
inline models::llama_config hf_llama_config(const std::string& path, const models::llama_options& compiled = {}) {
  json::value c = read_json_file(path);
  detail::expect_model_type(path, c, "llama");
  check_llama_config_sizes(path, c);
  if (const json::value* act = c.find("hidden_act"); act && act->as_string() != "silu")
    fail(path + ": hidden_act", "\"" + act->as_string() + "\" is not supported", "use \"silu\"");
  detail::expect_value(path, "rms_norm_eps", c.at("rms_norm_eps").as_double(), compiled.rms_norm_eps);
  const json::value* theta = c.find("rope_theta");
  if (theta == nullptr)
    if (const json::value* rp = c.find("rope_parameters"); rp && !rp->is_null()) theta = rp->find("rope_theta");
  detail::expect_value(path, "rope_theta", theta ? theta->as_double() : 10000.0, compiled.rope_theta);
  std::int64_t heads = c.at("num_attention_heads").as_int();
  const json::value* kv = c.find("num_key_value_heads");
  return {.vocab = c.at("vocab_size").as_int(), .model = c.at("hidden_size").as_int(),
          .ffn = c.at("intermediate_size").as_int(), .heads = heads,
          .kv_heads = kv && !kv->is_null() ? kv->as_int() : heads, .layers = c.at("num_hidden_layers").as_int()};
}

}  // namespace shardgraph::io
