#pragma once
// Every config.json field of the GPT-2 and LLaMA families, and what shardgraph does with it:
//
//   honoured      read by hf_gpt2_config / hf_llama_config (a size, or an option of the compiled
//                 model); a value the model does not implement is refused there, by name
//   no_effect     accepted with any value: it changes neither the logits, the loss nor the
//                 gradients of the models shardgraph runs (metadata, token ids, generation and
//                 output settings, initialisation, dropout; see `why`)
//   neutral_only  accepted only at a value that needs no support (`accepted`); any other value
//                 would change the numbers and is refused, naming the field and its value
//
// A key that is in no table is refused too: an unknown field may change the model. The tables
// cover every field of transformers' GPT2Config and LlamaConfig (tests/io/hf_config_fields_test.cpp
// checks them against tests/io/transformers_config_fields.hpp) and older fields still found in
// published config.json files. docs/loading.md shows them as a table.
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/json.hpp"

namespace shardgraph::io {

enum class field_treatment { honoured, no_effect, neutral_only };

struct config_field {
  std::string_view name;
  field_treatment treatment;
  // neutral_only: the accepted values as compact JSON texts, separated by '|' ("false|null").
  std::string_view accepted;
  // A value to test with (compact JSON): for no_effect, one that is accepted although not the
  // default; for honoured and neutral_only, one that is refused (empty: every value is honoured).
  std::string_view example;
  // honoured: the golden case (tests/golden/<case>) whose config.json sets the field to a value
  // other than in the family's own case (tests/golden/<family>); empty: the family's own case.
  std::string_view golden;
  std::string_view why;  // why it is accepted, or why refused and how to fix it
};

namespace detail {
using treatment = field_treatment;
inline constexpr treatment honoured = treatment::honoured, no_effect = treatment::no_effect,
                           neutral_only = treatment::neutral_only;

// Fields of PretrainedConfig, shared by every family (and older ones still in published files).
inline constexpr config_field common_config_fields[] = {
    {"_name_or_path", no_effect, "", "\"x\"", "", "metadata: where transformers loaded the config from"},
    {"architectures", no_effect, "", "[\"X\"]", "", "metadata: the model class; model_type picks the family"},
    {"transformers_version", no_effect, "", "\"1.0\"", "", "metadata"},
    {"model_type", honoured, "", "\"bert\"", "", "picks the family; another family is refused"},
    {"dtype", no_effect, "", "\"bfloat16\"", "", "the program's dtype is chosen when it is compiled"},
    {"torch_dtype", no_effect, "", "\"bfloat16\"", "", "the program's dtype is chosen when it is compiled"},
    {"use_cache", no_effect, "", "false", "",
     "inference state only; the inference engine keeps its own cache"},
    {"bos_token_id", no_effect, "", "7", "", "token ids are for tokenizers and generation"},
    {"eos_token_id", no_effect, "", "[7, 8]", "", "token ids are for tokenizers and generation"},
    {"pad_token_id", no_effect, "", "7", "", "token ids are for tokenizers and generation"},
    {"sep_token_id", no_effect, "", "7", "", "token ids are for tokenizers and generation"},
    {"decoder_start_token_id", no_effect, "", "7", "", "encoder-decoder generation only"},
    {"return_dict", no_effect, "", "false", "", "how transformers returns its outputs"},
    {"output_attentions", no_effect, "", "true", "", "how transformers returns its outputs"},
    {"output_hidden_states", no_effect, "", "true", "", "how transformers returns its outputs"},
    {"torchscript", no_effect, "", "true", "", "how transformers exports the model"},
    {"id2label", no_effect, "", "{}", "", "labels of classification heads, which shardgraph has not"},
    {"label2id", no_effect, "", "{}", "", "labels of classification heads, which shardgraph has not"},
    {"num_labels", no_effect, "", "3", "", "classification heads only"},
    {"problem_type", no_effect, "", "\"regression\"", "", "classification heads only"},
    {"finetuning_task", no_effect, "", "\"x\"", "", "metadata"},
    {"task_specific_params", no_effect, "", "{}", "", "generation settings of pipelines"},
    {"tokenizer_class", no_effect, "", "\"X\"", "", "metadata for the tokenizer"},
    {"prefix", no_effect, "", "\"x\"", "", "generation prompt prefix"},
    {"chunk_size_feed_forward", no_effect, "", "4", "",
     "transformers runs the MLP in chunks of positions: the same numbers, less memory"},
    {"initializer_range", no_effect, "", "0.5", "",
     "random initialisation only; weights come from the checkpoint"},
    {"is_decoder", no_effect, "", "false", "", "the models are causal decoders whatever it says"},
    {"tie_encoder_decoder", no_effect, "", "true", "", "no encoder"},
    {"max_length", no_effect, "", "7", "", "a generation setting"},
    {"do_sample", no_effect, "", "true", "", "a generation setting"},
    {"num_beams", no_effect, "", "4", "", "a generation setting"},
    {"temperature", no_effect, "", "0.5", "", "a generation setting"},
    {"top_k", no_effect, "", "5", "", "a generation setting"},
    {"top_p", no_effect, "", "0.5", "", "a generation setting"},
    {"is_encoder_decoder", neutral_only, "false", "true", "",
     "shardgraph's models are decoder-only; load a decoder-only checkpoint"},
    {"cross_attention_hidden_size", neutral_only, "null", "8", "",
     "shardgraph's models have no cross-attention; load a decoder-only checkpoint"},
    {"add_cross_attention", neutral_only, "false", "true", "",
     "shardgraph's models have no cross-attention; set it to false (a decoder-only model)"},
    {"pruned_heads", neutral_only, "{}", "{\"0\": [1]}", "",
     "pruned attention heads are not supported; give a checkpoint without pruned heads"},
};

inline constexpr config_field gpt2_config_fields[] = {
    {"vocab_size", honoured, "", "", "", "the vocabulary (padded to a multiple of tp when loaded)"},
    {"n_positions", honoured, "", "", "", "the learned position table's rows"},
    {"n_ctx", honoured, "", "7", "", "older name of n_positions: must equal it"},
    {"n_embd", honoured, "", "", "", "the hidden size"},
    {"n_layer", honoured, "", "", "", "the number of blocks"},
    {"n_head", honoured, "", "", "", "the number of attention heads"},
    {"n_inner", honoured, "", "0", "gpt2_untied", "the MLP width; null: 4 * n_embd"},
    {"activation_function", honoured, "", "\"relu\"", "",
     "\"gelu_new\" and \"gelu_pytorch_tanh\" (the same tanh GELU); others are refused"},
    {"layer_norm_epsilon", honoured, "", "", "", "must equal the compiled gpt2_options::layer_norm_eps"},
    {"tie_word_embeddings", honoured, "", "", "gpt2_untied",
     "true: logits = x wte^T; false: a separate lm_head.weight (gpt2_options::tie_word_embeddings)"},
    {"scale_attn_weights", honoured, "", "", "gpt2_unscaled",
     "false: attention scores without the 1/sqrt(head_dim) scale (gpt2_options::scale_attn_weights)"},
    {"scale_attn_by_inverse_layer_idx", neutral_only, "false", "true", "",
     "a scale of 1/(layer + 1) on layer l's attention scores is not implemented (the layers share one "
     "repeated graph, hence one scale); give a checkpoint trained without it"},
    {"reorder_and_upcast_attn", honoured, "", "", "",
     "numerics only (scores and softmax in float32): accepted for f32 and f64 programs, whose attention "
     "computes in at least float32; refused for 16-bit ones"},
    {"attn_pdrop", no_effect, "", "0.1", "", "dropout: off in inference; shardgraph trains without dropout"},
    {"embd_pdrop", no_effect, "", "0.1", "", "dropout: off in inference; shardgraph trains without dropout"},
    {"resid_pdrop", no_effect, "", "0.1", "", "dropout: off in inference; shardgraph trains without dropout"},
    {"summary_type", no_effect, "", "\"last\"", "", "GPT2DoubleHeadsModel's classification head only"},
    {"summary_use_proj", no_effect, "", "false", "", "GPT2DoubleHeadsModel's classification head only"},
    {"summary_activation", no_effect, "", "\"tanh\"", "", "GPT2DoubleHeadsModel's classification head only"},
    {"summary_proj_to_labels", no_effect, "", "false", "", "GPT2DoubleHeadsModel's classification head only"},
    {"summary_first_dropout", no_effect, "", "0.5", "", "GPT2DoubleHeadsModel's classification head only"},
    {"hidden_size", neutral_only, "", "16", "", "an alias of n_embd: write it as n_embd"},
    {"max_position_embeddings", neutral_only, "", "16", "",
     "an alias of n_positions: write it as n_positions"},
    {"num_attention_heads", neutral_only, "", "4", "", "an alias of n_head: write it as n_head"},
    {"num_hidden_layers", neutral_only, "", "2", "", "an alias of n_layer: write it as n_layer"},
};

// rope_theta, rope_parameters and rope_scaling: io/hf_rope.hpp lists the RoPE fields honoured.
inline constexpr config_field llama_config_fields[] = {
    {"vocab_size", honoured, "", "", "", "the vocabulary (padded to a multiple of tp when loaded)"},
    {"hidden_size", honoured, "", "", "", "the hidden size"},
    {"intermediate_size", honoured, "", "", "", "the MLP width"},
    {"num_hidden_layers", honoured, "", "", "", "the number of layers"},
    {"num_attention_heads", honoured, "", "", "", "the number of query heads"},
    {"num_key_value_heads", honoured, "", "", "", "the number of key/value heads; null: num_attention_heads"},
    {"head_dim", honoured, "", "0", "llama_tied_bias_headdim",
     "the head size; null: hidden_size / num_attention_heads"},
    {"hidden_act", honoured, "", "\"gelu\"", "", "\"silu\" only; others are refused"},
    {"rms_norm_eps", honoured, "", "", "", "must equal the compiled llama_options::rms_norm_eps"},
    {"attention_bias", honoured, "", "", "llama_tied_bias_headdim",
     "biases on q, k, v and o (llama_options::attention_bias)"},
    {"mlp_bias", honoured, "", "", "llama_tied_bias_headdim",
     "biases on gate, up and down (llama_options::mlp_bias)"},
    {"tie_word_embeddings", honoured, "", "", "llama_tied_bias_headdim",
     "true: logits = x embed_tokens^T, no lm_head.weight; false: lm_head.weight "
     "(llama_options::tie_word_embeddings)"},
    {"max_position_embeddings", honoured, "", "", "",
     "hf_model::positions; dynamic, llama3 and yarn RoPE read it (io/hf_rope.hpp); longer sequences run, as in transformers"},
    {"rope_theta", honoured, "", "-1", "llama_rope_linear",
     "RoPE's base, at the top level or in rope_parameters (io/hf_rope.hpp); must equal llama_options::rope"},
    {"rope_parameters", honoured, "", "{\"rope_type\": \"longrope\", \"factor\": 2.0}", "llama_rope_yarn",
     "rope_type default, linear, dynamic, llama3 or yarn and their fields (io/hf_rope.hpp); others are refused"},
    {"rope_scaling", honoured, "", "{\"type\": \"su\"}", "llama_rope_linear",
     "the older spelling of rope_parameters (type or rope_type; io/hf_rope.hpp)"},
    {"attention_dropout", no_effect, "", "0.1", "",
     "dropout: off in inference; shardgraph trains without dropout"},
    {"pretraining_tp", no_effect, "", "2", "",
     "transformers no longer uses it (it split the products: same numbers)"},
};
}  // namespace detail

// The fields a config.json of `family` ("gpt2" or "llama") may hold, family's own then common ones.
inline std::span<const config_field> family_config_fields(std::string_view family) {
  if (family == "gpt2") return detail::gpt2_config_fields;
  return detail::llama_config_fields;
}
inline const config_field* find_config_field(std::string_view family, std::string_view name) {
  for (const config_field& f : family_config_fields(family))
    if (f.name == name) return &f;
  for (const config_field& f : detail::common_config_fields)
    if (f.name == name) return &f;
  return nullptr;
}

// A value as compact JSON (numbers shortest-exact), for messages and for comparing with `accepted`.
inline std::string json_text(const json::value& v) {
  switch (v.type()) {
    case json::kind::null:
      return "null";
    case json::kind::boolean:
      return v.as_bool() ? "true" : "false";
    case json::kind::integer:
      return std::to_string(v.as_int());
    case json::kind::number: {
      char buffer[32];
      for (int digits = 1; digits <= 17; ++digits) {
        std::snprintf(buffer, sizeof buffer, "%.*g", digits, v.as_double());
        if (std::strtod(buffer, nullptr) == v.as_double()) break;
      }
      return buffer;
    }
    case json::kind::string:
      return json::quote(v.as_string());
    case json::kind::array: {
      std::string out = "[";
      for (const json::value& e : v.as_array()) out += (out.size() > 1 ? ", " : "") + json_text(e);
      return out + "]";
    }
    case json::kind::object: {
      std::string out = "{";
      for (const auto& [k, e] : v.as_object())
        out += (out.size() > 1 ? ", " : "") + json::quote(k) + ": " + json_text(e);
      return out + "}";
    }
  }
  return "?";
}

namespace detail {
inline bool is_accepted(std::string_view accepted, const std::string& text) {
  while (!accepted.empty()) {
    const std::size_t bar = accepted.find('|');
    if (accepted.substr(0, bar) == text) return true;
    accepted = bar == std::string_view::npos ? std::string_view{} : accepted.substr(bar + 1);
  }
  return false;
}
}  // namespace detail

// Refuses every key of `config` (a config.json of `family`, read from `path`) that is in no table,
// or neutral_only with another value. Honoured fields are checked by the family's reader.
inline void check_config_fields(const std::string& path, const json::value& config, std::string_view family) {
  for (const auto& [key, value] : config.as_object()) {
    const config_field* f = find_config_field(family, key);
    if (f == nullptr)
      fail(path + ": " + key,
           "\"" + key + "\": " + json_text(value) + " is not a " + std::string(family) +
               " config.json field shardgraph knows, so it may change the model",
           "remove it if it changes nothing the model computes (docs/loading.md lists the fields shardgraph "
           "honours, accepts and refuses)");
    if (f->treatment == field_treatment::neutral_only && !detail::is_accepted(f->accepted, json_text(value)))
      fail(path + ": " + key, "\"" + key + "\": " + json_text(value) + " is not supported", f->why);
  }
}

}  // namespace shardgraph::io
