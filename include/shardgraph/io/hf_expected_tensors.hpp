#pragma once
// The contract between a HF config.json and its safetensors files: the tensors the config implies
// (each one's name in the checkpoint and its full shape), and the check of a checkpoint against
// that list. Loading is strict: every tensor the config implies must be in the files, of a float
// dtype (F64, F32, BF16 or F16; converted to the model's) and of exactly the implied shape; a
// tensor in the files that no parameter reads is an error unless unused tensors are allowed.
//
//   hf_gpt2_tensors({.vocab = 96, .positions = 32, .model = 32, .heads = 4, .layers = 2}, "transformer.")
//     -> transformer.wte.weight (96, 32), transformer.wpe.weight (32, 32), transformer.h.0.ln_1.weight
//        (32,), ..., transformer.h.0.attn.c_attn.weight (32, 96), ..., transformer.ln_f.bias (32,)
//
// A config field that adds or removes tensors (a bias, an untied head) is honoured in these lists.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/safetensors.hpp"
#include "shardgraph/io/safetensors_checkpoint.hpp"
#include "shardgraph/models/gpt2.hpp"
#include "shardgraph/models/llama.hpp"

namespace shardgraph::io {

// A tensor a config implies: its name in the checkpoint and its full shape.
struct hf_tensor_spec {
  std::string name;
  std::vector<std::int64_t> shape;
};

// A tensor a checkpoint holds: the file it is in (for messages), its dtype and shape.
struct hf_found_tensor {
  std::string name, file;
  st_dtype dtype = st_dtype::f32;
  std::vector<std::int64_t> shape;
};

namespace detail {

// a * b for sizes read from a config; an error instead of a wrapped product.
inline std::int64_t size_product(std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t p = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &p))
    fail("config.json",
         std::string(what) + " = " + std::to_string(a) + " * " + std::to_string(b) +
             " is negative or does not fit in 64 bits",
         "give the sizes of a real model");
  return p;
}

inline bool is_float_dtype(st_dtype t) {
  return t == st_dtype::f64 || t == st_dtype::f32 || t == st_dtype::bf16 || t == st_dtype::f16;
}

// "expected a float tensor (F64, F32, BF16 or F16) of shape (96, 32) (from <by>), found I32 (96, 32)":
// the message of every tensor that disagrees with what the config or the model implies.
inline std::string tensor_mismatch(std::span<const std::int64_t> expected, std::string_view by,
                                   std::string_view found) {
  return "expected a float tensor (F64, F32, BF16 or F16) of shape " + shape_string(expected) + " (from " +
         std::string(by) + "), found " + std::string(found);
}
inline std::string found_string(st_dtype dtype, std::span<const std::int64_t> shape) {
  return std::string(st_dtype_name(dtype)) + " " + shape_string(shape);
}

inline constexpr std::size_t unused_names_listed = 5;

}  // namespace detail

// GPT2LMHeadModel's tensors for models::gpt2 of sizes `c` (c.vocab: config.json's vocab_size, not a
// padded one). `prefix`: "transformer." as GPT2LMHeadModel saves, or "" as GPT2Model's files. A
// tied head (tie_word_embeddings) reads wte, so there is no lm_head.weight; an untied one is
// lm_head.weight, outside the prefix. The MLP is c.ffn wide (n_inner), or 4 * n_embd.
inline std::vector<hf_tensor_spec> hf_gpt2_tensors(const models::gpt2_config& c, const std::string& prefix,
                                                   bool tied = true) {
  const std::int64_t d = c.model;
  const std::int64_t three_d = detail::size_product(3, d, "3 * n_embd"),
                     four_d = c.ffn > 0 ? c.ffn : detail::size_product(4, d, "4 * n_embd");
  std::vector<hf_tensor_spec> t{{prefix + "wte.weight", {c.vocab, d}},
                                {prefix + "wpe.weight", {c.positions, d}}};
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = prefix + "h." + std::to_string(l) + ".";
    t.insert(t.end(), {{p + "ln_1.weight", {d}},
                       {p + "ln_1.bias", {d}},
                       {p + "attn.c_attn.weight", {d, three_d}},  // q, k, v side by side (Conv1D: in, out)
                       {p + "attn.c_attn.bias", {three_d}},
                       {p + "attn.c_proj.weight", {d, d}},
                       {p + "attn.c_proj.bias", {d}},
                       {p + "ln_2.weight", {d}},
                       {p + "ln_2.bias", {d}},
                       {p + "mlp.c_fc.weight", {d, four_d}},
                       {p + "mlp.c_fc.bias", {four_d}},
                       {p + "mlp.c_proj.weight", {four_d, d}},
                       {p + "mlp.c_proj.bias", {d}}});
  }
  t.insert(t.end(), {{prefix + "ln_f.weight", {d}}, {prefix + "ln_f.bias", {d}}});
  if (!tied) t.push_back({"lm_head.weight", {c.vocab, d}});
  return t;
}

// LlamaForCausalLM's tensors for models::llama of sizes `c` (Linear weights are (out, in)) and the
// options config.json gives: with tie_word_embeddings the head reads model.embed_tokens.weight and
// there is no lm_head.weight; attention_bias and mlp_bias add the projections' biases. Heads are
// c.head_dim wide (head_dim), or hidden_size / num_attention_heads.
inline std::vector<hf_tensor_spec> hf_llama_tensors(const models::llama_config& c, const models::llama_options& o) {
  const std::int64_t d = c.model, head_dim = c.head_dim > 0 ? c.head_dim : c.heads > 0 ? c.model / c.heads : 0;
  const std::int64_t q = detail::size_product(c.heads, head_dim, "num_attention_heads * head_dim"),
                     kv = detail::size_product(c.kv_heads, head_dim, "num_key_value_heads * head_dim");
  std::vector<hf_tensor_spec> t{{"model.embed_tokens.weight", {c.vocab, d}}};
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.insert(t.end(), {{p + "input_layernorm.weight", {d}},
                       {p + "self_attn.q_proj.weight", {q, d}},
                       {p + "self_attn.k_proj.weight", {kv, d}},
                       {p + "self_attn.v_proj.weight", {kv, d}},
                       {p + "self_attn.o_proj.weight", {d, q}},
                       {p + "post_attention_layernorm.weight", {d}},
                       {p + "mlp.gate_proj.weight", {c.ffn, d}},
                       {p + "mlp.up_proj.weight", {c.ffn, d}},
                       {p + "mlp.down_proj.weight", {d, c.ffn}}});
    if (o.attention_bias)
      t.insert(t.end(), {{p + "self_attn.q_proj.bias", {q}},
                         {p + "self_attn.k_proj.bias", {kv}},
                         {p + "self_attn.v_proj.bias", {kv}},
                         {p + "self_attn.o_proj.bias", {d}}});
    if (o.mlp_bias)
      t.insert(t.end(), {{p + "mlp.gate_proj.bias", {c.ffn}},
                         {p + "mlp.up_proj.bias", {c.ffn}},
                         {p + "mlp.down_proj.bias", {d}}});
  }
  t.push_back({"model.norm.weight", {d}});
  if (!o.tie_word_embeddings) t.push_back({"lm_head.weight", {c.vocab, d}});
  return t;
}
inline std::vector<hf_tensor_spec> hf_llama_tensors(const models::llama_config& c, bool tied) {
  return hf_llama_tensors(c, models::llama_options{.tie_word_embeddings = tied});
}

// Tensors that transformers itself skips on load: buffers older checkpoints saved beside the
// weights (GPT-2's causal masks h.N.attn.bias / masked_bias, LLaMA's rotary inv_freq). They hold
// no weights and are never reported as unused.
inline bool hf_non_weight_buffer(std::string_view name) {
  return name.ends_with(".attn.masked_bias") || name.ends_with(".rotary_emb.inv_freq") ||
         (name.ends_with(".attn.bias") && name.find(".attn.c_attn") == std::string_view::npos);
}

// The tensors of `checkpoint`, with their file, dtype and shape (headers only: no tensor is read).
inline std::vector<hf_found_tensor> hf_tensors_of(const safetensors_checkpoint& checkpoint) {
  std::vector<hf_found_tensor> found;
  for (const std::string& name : checkpoint.tensor_names()) {
    const safetensors_file& file = checkpoint.file_of(name);
    const tensor_info& info = file.info(name);
    found.push_back({name, file.name(), info.dtype, info.shape});
  }
  return found;
}

// Checks `found` (a checkpoint's tensors) against `expected` (what `config_path` implies): every
// expected tensor is present, of a float dtype and of exactly its shape; unless `allow_unused`,
// every found tensor is expected (or a non-weight buffer). `source` names the checkpoint.
inline void check_hf_tensors(const std::vector<hf_found_tensor>& found,
                             const std::vector<hf_tensor_spec>& expected, const std::string& source,
                             const std::string& config_path, bool allow_unused) {
  const std::string how =
      "give the config.json that describes this checkpoint, or the checkpoint it describes";
  std::map<std::string_view, const hf_found_tensor*> by_name;
  for (const hf_found_tensor& f : found) by_name.emplace(f.name, &f);
  std::set<std::string_view> implied;
  for (const hf_tensor_spec& e : expected) {
    implied.insert(e.name);
    const auto at = by_name.find(e.name);
    if (at == by_name.end())
      fail(source + ": tensor '" + e.name + "'",
           detail::tensor_mismatch(e.shape, config_path, "no such tensor"), how);
    const hf_found_tensor* it = at->second;
    if (!detail::is_float_dtype(it->dtype) || it->shape != e.shape)
      fail(it->file + ": tensor '" + detail::shorten(e.name) + "'",
           detail::tensor_mismatch(e.shape, config_path, detail::found_string(it->dtype, it->shape)), how);
  }
  if (allow_unused) return;
  std::vector<std::string> unused;
  for (const hf_found_tensor& f : found)
    if (!implied.contains(f.name) && !hf_non_weight_buffer(f.name)) unused.push_back(f.name);
  if (unused.empty()) return;
  std::string list;
  for (std::size_t i = 0; i < unused.size() && i < detail::unused_names_listed; ++i)
    list += (i ? ", '" : "'") + detail::shorten(unused[i]) + "'";
  if (unused.size() > detail::unused_names_listed)
    list += " and " + std::to_string(unused.size() - detail::unused_names_listed) + " more";
  fail(source,
       std::to_string(unused.size()) + " unused tensor" + (unused.size() == 1 ? "" : "s") +
           " (read by no parameter of the model that " + config_path + " describes): " + list,
       "give the config.json of this checkpoint (its layer count and sizes), or allow unused tensors "
       "(hf_model_options::allow_unused_tensors, --allow-unused-tensors)");
}

}  // namespace shardgraph::io
