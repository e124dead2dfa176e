#pragma once
// HF config.json import for the GPT-2 and LLaMA families: the sizes bind needs, and the
// compile-time options (eps, RoPE, biases, tied head) read from the file (hf_*_options) or
// checked against the compiled model (hf_*_config). The sizes are checked (hf_config_sizes.hpp)
// before anything is computed from them; every other field is honoured, accepted or refused as
// hf_config_fields.hpp lists.
#include <fstream>
#include <sstream>
#include <string>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/file_contents.hpp"
#include "shardgraph/io/hf_config_fields.hpp"
#include "shardgraph/io/hf_config_sizes.hpp"
#include "shardgraph/io/hf_rope.hpp"
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
inline void expect_flag(const std::string& path, const char* key, bool in_file, bool compiled) {
  const auto text = [](bool b) { return std::string(b ? "true" : "false"); };
  if (in_file != compiled)
    fail(path + ": " + key,
         "the checkpoint says " + text(in_file) + " but the program was compiled with " + text(compiled),
         std::string("compile the model with ") + key + " = " + text(in_file) +
             " (the model's options; hf_gpt2_options and hf_llama_options read them from config.json)");
}
inline void expect_rope(const std::string& path, const rope_scaling& in_file, const rope_scaling& compiled) {
  expect_value(path, "rope_theta", in_file.theta, compiled.theta);
  if (in_file != compiled)
    fail(path + ": rope_parameters",
         "the checkpoint's RoPE (rope_type \"" + std::string(rope_type_name(in_file.type)) +
             "\") differs from the compiled model's (rope_type \"" + std::string(rope_type_name(compiled.type)) +
             "\") or in one of its numbers",
         "compile the model with the checkpoint's io::hf_rope_scaling (llama_options::rope)");
}
inline void expect_model_type(const std::string& path, const json::value& c, const char* type) {
  if (const json::value* t = c.find("model_type"); t && t->as_string() != type)
    fail(path, "model_type is \"" + t->as_string() + "\", not \"" + type + "\"", std::string("load a ") + type + " checkpoint");
}
// A boolean field, or `otherwise` when absent (transformers' default for the family).
inline bool flag_or(const json::value& c, std::string_view key, bool otherwise) {
  const json::value* v = c.find(key);
  return v ? v->as_bool() : otherwise;
}
// A size that may be null or absent (0: derived by the model from the others).
inline std::int64_t optional_size(const json::value& c, std::string_view key) {
  const json::value* v = c.find(key);
  return v && !v->is_null() ? v->as_int() : 0;
}
}  // namespace detail

// The options of models::gpt2 that config.json fixes; the others (dtype, axes) as in `base`.
inline models::gpt2_options hf_gpt2_options(const json::value& c, models::gpt2_options base = {}) {
  base.layer_norm_eps = c.at("layer_norm_epsilon").as_double();
  base.tie_word_embeddings = detail::flag_or(c, "tie_word_embeddings", true);
  base.scale_attn_weights = detail::flag_or(c, "scale_attn_weights", true);
  return base;
}
inline models::gpt2_options hf_gpt2_options(const std::string& path, models::gpt2_options base = {}) {
  return hf_gpt2_options(read_json_file(path), base);
}

// Reads a GPT-2 config.json: refuses fields shardgraph does not implement (hf_config_fields.hpp),
// checks eps, the activation, the tied head and the attention scale against `compiled`, and
// returns the sizes.
inline models::gpt2_config hf_gpt2_config(const std::string& path, const models::gpt2_options& compiled = {}) {
  json::value c = read_json_file(path);
  detail::expect_model_type(path, c, "gpt2");
  check_gpt2_config_sizes(path, c);
  check_config_fields(path, c, "gpt2");
  if (const json::value* act = c.find("activation_function");
      act && act->as_string() != "gelu_new" && act->as_string() != "gelu_pytorch_tanh")
    fail(path + ": activation_function", "\"" + act->as_string() + "\" is not supported",
         "use \"gelu_new\" (GPT-2's tanh GELU)");
  const std::int64_t positions = c.at("n_positions").as_int();
  if (const json::value* ctx = c.find("n_ctx"); ctx && ctx->as_int() != positions)
    fail(path + ": n_ctx",
         "\"n_ctx\": " + std::to_string(ctx->as_int()) + " differs from n_positions " +
             std::to_string(positions),
         "set n_ctx to n_positions, or remove it (transformers reads only n_positions)");
  if (detail::flag_or(c, "reorder_and_upcast_attn", false) && dtype_size(compiled.type) < 4) {
    const std::string why =
        "\"reorder_and_upcast_attn\": true asks for attention scores in float32, and the "
        "program computes in " +
        std::string(dtype_name(compiled.type));
    fail(
        path + ": reorder_and_upcast_attn", why,
        "compile the model in f32, or set it to false (transformers' default sdpa attention ignores it too)");
  }
  detail::expect_value(path, "layer_norm_epsilon", c.at("layer_norm_epsilon").as_double(), compiled.layer_norm_eps);
  detail::expect_flag(path, "tie_word_embeddings", detail::flag_or(c, "tie_word_embeddings", true),
                      compiled.tie_word_embeddings);
  detail::expect_flag(path, "scale_attn_weights", detail::flag_or(c, "scale_attn_weights", true),
                      compiled.scale_attn_weights);
  const std::int64_t inner = detail::optional_size(c, "n_inner");  // positive or absent: checked above
  return {.vocab = c.at("vocab_size").as_int(),
          .positions = positions,
          .model = c.at("n_embd").as_int(),
          .heads = c.at("n_head").as_int(),
          .layers = c.at("n_layer").as_int(),
          .ffn = inner};
}

// The options of models::llama that config.json fixes; the others (dtype, axes) as in `base`.
inline models::llama_options hf_llama_options(const std::string& path, const json::value& c,
                                              models::llama_options base = {}) {
  base.rms_norm_eps = c.at("rms_norm_eps").as_double();
  base.rope = hf_rope_scaling(c, path);
  base.tie_word_embeddings = detail::flag_or(c, "tie_word_embeddings", false);
  base.attention_bias = detail::flag_or(c, "attention_bias", false);
  base.mlp_bias = detail::flag_or(c, "mlp_bias", false);
  return base;
}
inline models::llama_options hf_llama_options(const std::string& path, models::llama_options base = {}) {
  return hf_llama_options(path, read_json_file(path), base);
}

// Reads a LLaMA config.json: refuses fields shardgraph does not implement (hf_config_fields.hpp),
// checks eps, the RoPE (theta and scaling), the biases and the tied head against `compiled`, and returns the sizes.
// `c`: the config's JSON (LLaVA's text_config); `path` names it in messages.
inline models::llama_config hf_llama_config(const std::string& path, const json::value& c,
                                            const models::llama_options& compiled) {
  detail::expect_model_type(path, c, "llama");
  check_llama_config_sizes(path, c);
  check_config_fields(path, c, "llama");
  if (const json::value* act = c.find("hidden_act"); act && act->as_string() != "silu")
    fail(path + ": hidden_act", "\"" + act->as_string() + "\" is not supported", "use \"silu\"");
  const models::llama_options in_file = hf_llama_options(path, c);
  detail::expect_value(path, "rms_norm_eps", in_file.rms_norm_eps, compiled.rms_norm_eps);
  detail::expect_rope(path, in_file.rope, compiled.rope);
  detail::expect_flag(path, "tie_word_embeddings", in_file.tie_word_embeddings, compiled.tie_word_embeddings);
  detail::expect_flag(path, "attention_bias", in_file.attention_bias, compiled.attention_bias);
  detail::expect_flag(path, "mlp_bias", in_file.mlp_bias, compiled.mlp_bias);
  const std::int64_t heads = c.at("num_attention_heads").as_int();
  const std::int64_t kv_heads = detail::optional_size(c, "num_key_value_heads");
  const std::int64_t head_dim = detail::optional_size(c, "head_dim");  // positive or absent: checked above
  return {
      .vocab = c.at("vocab_size").as_int(),
      .model = c.at("hidden_size").as_int(),
      .ffn = c.at("intermediate_size").as_int(),
      .heads = heads,
      .kv_heads = c.find("num_key_value_heads") && !c.at("num_key_value_heads").is_null() ? kv_heads : heads,
      .layers = c.at("num_hidden_layers").as_int(),
      .head_dim = head_dim};
}
inline models::llama_config hf_llama_config(const std::string& path, const models::llama_options& compiled = {}) {
  return hf_llama_config(path, read_json_file(path), compiled);
}

}  // namespace shardgraph::io
