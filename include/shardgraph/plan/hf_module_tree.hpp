#pragma once
// hf_module_tree: the module hierarchy transformers builds for a GPT-2 (GPT2LMHeadModel) or LLaMA
// (LlamaForCausalLM) config, with each tensor's bytes in the dtype the model is loaded in, as
// Accelerate's placement sees it (plan/module_tree.hpp). Every module transformers registers is
// here, those without tensors too (dropouts, activations): the placement walks them all.
//
//   GPT-2                                    LLaMA
//   transformer.wte, transformer.wpe         model.embed_tokens                  embedding
//   transformer.h.0 ... (GPT2Block)          model.layers.0 ... (LlamaDecoderLayer)   layers
//   transformer.ln_f, lm_head                model.norm, lm_head                 head
//                                            model.rotary_emb (buffers inv_freq, original_inv_freq)
//
// Parameters take dtype's bytes; the rotary buffers stay float32 in transformers, and Accelerate
// counts a tensor at min(dtype, its own dtype), so they take min(dtype's bytes, 4). A tied head
// (tie_word_embeddings) is lm_head.weight sharing the embedding's tensor: counted once.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/io/hf_config.hpp"
#include "shardgraph/models/gpt2.hpp"
#include "shardgraph/models/llama.hpp"
#include "shardgraph/plan/module_tree.hpp"

namespace shardgraph::plan {

struct hf_module_tree {
  std::string family;  // "gpt2" or "llama"
  dtype type = dtype::f32;
  module_tree tree{};
  // The modules a pipeline runs, in order: the embedding tables, one module per decoder layer,
  // then the final norm and lm_head. Every other module with tensors (LLaMA's rotary_emb) holds
  // only buffers each stage recomputes.
  std::vector<std::string> embedding{}, layers{}, head{};
  std::string tied_head{};  // the embedding module lm_head shares its table with; empty when untied
};

namespace detail {

struct tree_builder {
  module_tree& t;
  std::int64_t element_bytes;

  // The root of class `root_class`, whose `layer_class` modules are placed whole.
  tree_builder(hf_module_tree& m, const std::string& root_class, const std::string& layer_class)
      : t(m.tree), element_bytes(static_cast<std::int64_t>(dtype_size(m.type))) {
    t.entries[0].class_name = root_class;
    t.no_split = {layer_class};
  }

  std::int64_t bytes(std::int64_t a, std::int64_t b = 1) const {
    return checked_multiply(checked_multiply(a, b, "hf_module_tree: tensor elements"), element_bytes,
                            "hf_module_tree: tensor bytes");
  }
  int leaf(int parent, const std::string& name, const std::string& class_name) const {
    return t.add_module(parent, name, class_name);
  }
  // A module with `weight` (rows, columns) and, if `bias`, bias (bias_size).
  int weighted(int parent, const std::string& name, const std::string& class_name, std::int64_t rows,
               std::int64_t columns, std::int64_t bias_size) const {
    const int m = t.add_module(parent, name, class_name);
    t.add_parameter(m, "weight", bytes(rows, columns));
    if (bias_size > 0) t.add_parameter(m, "bias", bytes(bias_size));
    return m;
  }
};

// lm_head (vocab, model): its own table, or the one of `embedding` (tied) when that is not empty.
inline void add_lm_head(hf_module_tree& m, const tree_builder& b, const std::string& embedding,
                        std::int64_t vocab, std::int64_t model) {
  if (embedding.empty()) {
    b.weighted(0, "lm_head", "Linear", vocab, model, 0);
    return;
  }
  m.tree.add_tied_parameter(b.leaf(0, "lm_head", "Linear"), "weight", embedding + ".weight");
  m.tied_head = embedding;
}

inline void add_gpt2_block(const tree_builder& b, int h, std::int64_t i, const models::gpt2_config& c) {
  const std::int64_t d = c.model,
                     ffn = c.ffn > 0 ? c.ffn : checked_multiply(4, d, "hf_module_tree: 4 * n_embd");
  const int block = b.leaf(h, std::to_string(i), "GPT2Block");
  b.weighted(block, "ln_1", "LayerNorm", 1, d, d);
  const int attn = b.leaf(block, "attn", "GPT2Attention");
  b.weighted(attn, "c_attn", "Conv1D", d, 3 * d, 3 * d);  // Conv1D's weight is (in, out)
  b.weighted(attn, "c_proj", "Conv1D", d, d, d);
  b.leaf(attn, "attn_dropout", "Dropout");
  b.leaf(attn, "resid_dropout", "Dropout");
  b.weighted(block, "ln_2", "LayerNorm", 1, d, d);
  const int mlp = b.leaf(block, "mlp", "GPT2MLP");
  b.weighted(mlp, "c_fc", "Conv1D", d, ffn, ffn);
  b.weighted(mlp, "c_proj", "Conv1D", ffn, d, d);
  b.leaf(mlp, "act", "NewGELUActivation");
  b.leaf(mlp, "dropout", "Dropout");
}

inline void add_llama_layer(const tree_builder& b, int layers, std::int64_t i, const models::llama_config& c,
                            const models::llama_options& o) {
  const std::int64_t d = c.model, head_dim = c.head_dim > 0 ? c.head_dim : c.model / c.heads;
  const std::int64_t q = c.heads * head_dim, kv = c.kv_heads * head_dim;
  const auto bias = [](bool on, std::int64_t n) { return on ? n : std::int64_t{0}; };
  const int layer = b.leaf(layers, std::to_string(i), "LlamaDecoderLayer");
  const int attn = b.leaf(layer, "self_attn", "LlamaAttention");
  b.weighted(attn, "q_proj", "Linear", q, d, bias(o.attention_bias, q));  // Linear's weight is (out, in)
  b.weighted(attn, "k_proj", "Linear", kv, d, bias(o.attention_bias, kv));
  b.weighted(attn, "v_proj", "Linear", kv, d, bias(o.attention_bias, kv));
  b.weighted(attn, "o_proj", "Linear", d, q, bias(o.attention_bias, d));
  const int mlp = b.leaf(layer, "mlp", "LlamaMLP");
  b.weighted(mlp, "gate_proj", "Linear", c.ffn, d, bias(o.mlp_bias, c.ffn));
  b.weighted(mlp, "up_proj", "Linear", c.ffn, d, bias(o.mlp_bias, c.ffn));
  b.weighted(mlp, "down_proj", "Linear", d, c.ffn, bias(o.mlp_bias, d));
  b.leaf(mlp, "act_fn", "SiLUActivation");
  b.weighted(layer, "input_layernorm", "LlamaRMSNorm", 1, d, 0);
  b.weighted(layer, "post_attention_layernorm", "LlamaRMSNorm", 1, d, 0);
}

}  // namespace detail

// GPT2LMHeadModel for `c` (its vocab, not a padded one), lm_head tied to transformer.wte when `tied`.
inline hf_module_tree gpt2_module_tree(const models::gpt2_config& c, bool tied, dtype type) {
  hf_module_tree m{.family = "gpt2", .type = type};
  const detail::tree_builder b(m, "GPT2LMHeadModel", "GPT2Block");
  const int transformer = b.leaf(0, "transformer", "GPT2Model");
  b.weighted(transformer, "wte", "Embedding", c.vocab, c.model, 0);
  b.weighted(transformer, "wpe", "Embedding", c.positions, c.model, 0);
  b.leaf(transformer, "drop", "Dropout");
  const int h = b.leaf(transformer, "h", "ModuleList");
  for (std::int64_t i = 0; i < c.layers; ++i) {
    detail::add_gpt2_block(b, h, i, c);
    m.layers.push_back("transformer.h." + std::to_string(i));
  }
  b.weighted(transformer, "ln_f", "LayerNorm", 1, c.model, c.model);
  detail::add_lm_head(m, b, tied ? "transformer.wte" : "", c.vocab, c.model);
  m.embedding = {"transformer.wte", "transformer.wpe"};
  m.head = {"transformer.ln_f", "lm_head"};
  return m;
}

// LlamaForCausalLM for `c` (its vocab) with o's biases and tied head.
inline hf_module_tree llama_module_tree(const models::llama_config& c, const models::llama_options& o,
                                        dtype type) {
  hf_module_tree m{.family = "llama", .type = type};
  const detail::tree_builder b(m, "LlamaForCausalLM", "LlamaDecoderLayer");
  const int model = b.leaf(0, "model", "LlamaModel");
  b.weighted(model, "embed_tokens", "Embedding", c.vocab, c.model, 0);
  const int layers = b.leaf(model, "layers", "ModuleList");
  for (std::int64_t i = 0; i < c.layers; ++i) {
    detail::add_llama_layer(b, layers, i, c, o);
    m.layers.push_back("model.layers." + std::to_string(i));
  }
  b.weighted(model, "norm", "LlamaRMSNorm", 1, c.model, 0);
  const int rotary = b.leaf(model, "rotary_emb", "LlamaRotaryEmbedding");
  const std::int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.model / c.heads;
  const std::int64_t buffer_bytes = (head_dim / 2) * std::min<std::int64_t>(b.element_bytes, 4);
  b.t.add_buffer(rotary, "inv_freq", buffer_bytes);
  b.t.add_buffer(rotary, "original_inv_freq", buffer_bytes);
  detail::add_lm_head(m, b, o.tie_word_embeddings ? "model.embed_tokens" : "", c.vocab, c.model);
  m.embedding = {"model.embed_tokens"};
  m.head = {"model.norm", "lm_head"};
  return m;
}

// The tree of the model a config.json describes (checked as io::hf_gpt2_config and
// io::hf_llama_config check it), in `type`.
inline hf_module_tree hf_module_tree_of(const std::string& config_path, dtype type) {
  const io::json::value config = io::read_json_file(config_path);
  const io::json::value* family = config.find("model_type");
  const std::string name = family && family->type() == io::json::kind::string ? family->as_string() : "";
  if (name == "gpt2") {
    const models::gpt2_options options = io::hf_gpt2_options(config);
    return gpt2_module_tree(io::hf_gpt2_config(config_path, options), options.tie_word_embeddings, type);
  }
  if (name == "llama") {
    const models::llama_options options = io::hf_llama_options(config_path, config);
    return llama_module_tree(io::hf_llama_config(config_path, options), options, type);
  }
  fail(config_path, "model_type is not \"gpt2\" or \"llama\"",
       "give the config.json of a GPT-2 or LLaMA model");
}

}  // namespace shardgraph::plan
