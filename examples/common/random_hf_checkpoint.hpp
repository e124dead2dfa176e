#pragma once
// Random-weight HF checkpoints of any GPT-2 or LLaMA size, written as save_pretrained writes them:
// config.json and model.safetensors, or model-0000k-of-0000n.safetensors files and
// model.safetensors.index.json when the tensors exceed max_file_bytes. HF transformers'
// from_pretrained reads them, so loaders can be tested and timed on large models without a
// download. The values depend only on the seed and the tensor's name, not on the thread count.
//
//   auto spec = sg::examples::random_hf_model::preset("llama-7b");
//   spec.dtype = sg::io::st_dtype::bf16;
//   sg::examples::write_random_hf_checkpoint("/tmp/llama-7b", spec);
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/half.hpp"
#include "shardgraph/io/atomic_file_writer.hpp"
#include "shardgraph/io/hf_checkpoint_writer.hpp"
#include "shardgraph/io/safetensors.hpp"

namespace shardgraph::examples {

struct random_hf_model {
  std::string family = "llama";  // "gpt2" or "llama"
  std::int64_t vocab = 256, model = 64, layers = 2, heads = 4;
  std::int64_t kv_heads = 4;  // LLaMA: grouped-query attention when fewer than heads
  std::int64_t ffn = 128;     // LLaMA's intermediate_size; GPT-2's MLP is 4 * model
  std::int64_t positions = 1024;
  io::st_dtype dtype = io::st_dtype::f32;  // F32, BF16 or F16
  std::uint64_t max_file_bytes =
      0;  // 0: one model.safetensors; else files of at most this (one tensor may exceed it)
  std::uint64_t seed = 1;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());

  // Shapes of published models: gpt2 (124M), gpt2-medium (350M), gpt2-large (774M), gpt2-xl (1.5B),
  // llama-1b (TinyLlama 1.1B), llama-7b (Llama 2 7B).
  static random_hf_model preset(std::string_view name) {
    random_hf_model m;
    const auto gpt2 = [&](std::int64_t d, std::int64_t l, std::int64_t h) {
      m.family = "gpt2", m.vocab = 50257, m.positions = 1024, m.model = d, m.layers = l, m.heads = h;
      m.kv_heads = h, m.ffn = 4 * d;
    };
    const auto llama = [&](std::int64_t d, std::int64_t f, std::int64_t l, std::int64_t h, std::int64_t kv) {
      m.family = "llama", m.vocab = 32000, m.model = d, m.ffn = f, m.layers = l, m.heads = h, m.kv_heads = kv;
      m.positions = 2048;
    };
    if (name == "gpt2")
      gpt2(768, 12, 12);
    else if (name == "gpt2-medium")
      gpt2(1024, 24, 16);
    else if (name == "gpt2-large")
      gpt2(1280, 36, 20);
    else if (name == "gpt2-xl")
      gpt2(1600, 48, 25);
    else if (name == "llama-1b")
      llama(2048, 5632, 22, 32, 4);
    else if (name == "llama-7b")
      llama(4096, 11008, 32, 32, 32);
    else
      fail("random_hf_model::preset", "no preset \"" + std::string(name) + "\"",
           "give gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-1b or llama-7b");
    return m;
  }
};

namespace detail {

// A tensor of the checkpoint: HF name, shape, and how it is drawn.
struct random_tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  enum class fill { matrix, bias, norm } kind = fill::matrix;
};

inline std::vector<random_tensor> random_tensors(const random_hf_model& m) {
  using f = random_tensor::fill;
  std::vector<random_tensor> t;
  const std::int64_t d = m.model;
  if (m.family == "gpt2") {
    t.push_back({"transformer.wte.weight", {m.vocab, d}});
    t.push_back({"transformer.wpe.weight", {m.positions, d}});
    for (std::int64_t l = 0; l < m.layers; ++l) {
      const std::string p = "transformer.h." + std::to_string(l) + ".";
      t.push_back({p + "ln_1.weight", {d}, f::norm});
      t.push_back({p + "ln_1.bias", {d}, f::bias});
      t.push_back({p + "attn.c_attn.weight", {d, 3 * d}});
      t.push_back({p + "attn.c_attn.bias", {3 * d}, f::bias});
      t.push_back({p + "attn.c_proj.weight", {d, d}});
      t.push_back({p + "attn.c_proj.bias", {d}, f::bias});
      t.push_back({p + "ln_2.weight", {d}, f::norm});
      t.push_back({p + "ln_2.bias", {d}, f::bias});
      t.push_back({p + "mlp.c_fc.weight", {d, 4 * d}});
      t.push_back({p + "mlp.c_fc.bias", {4 * d}, f::bias});
      t.push_back({p + "mlp.c_proj.weight", {4 * d, d}});
      t.push_back({p + "mlp.c_proj.bias", {d}, f::bias});
    }
    t.push_back({"transformer.ln_f.weight", {d}, f::norm});
    t.push_back({"transformer.ln_f.bias", {d}, f::bias});
  } else {
    const std::int64_t head_dim = d / m.heads;
    t.push_back({"model.embed_tokens.weight", {m.vocab, d}});
    for (std::int64_t l = 0; l < m.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      t.push_back({p + "input_layernorm.weight", {d}, f::norm});
      t.push_back({p + "self_attn.q_proj.weight", {m.heads * head_dim, d}});
      t.push_back({p + "self_attn.k_proj.weight", {m.kv_heads * head_dim, d}});
      t.push_back({p + "self_attn.v_proj.weight", {m.kv_heads * head_dim, d}});
      t.push_back({p + "self_attn.o_proj.weight", {d, m.heads * head_dim}});
      t.push_back({p + "post_attention_layernorm.weight", {d}, f::norm});
      t.push_back({p + "mlp.gate_proj.weight", {m.ffn, d}});
      t.push_back({p + "mlp.up_proj.weight", {m.ffn, d}});
      t.push_back({p + "mlp.down_proj.weight", {d, m.ffn}});
    }
    t.push_back({"model.norm.weight", {d}, f::norm});
    t.push_back({"lm_head.weight", {m.vocab, d}});
  }
  return t;
}

inline std::uint64_t mix64(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element i of a tensor: uniform with the standard deviation of HF's initializer_range (0.02) for
// matrices, 0.02 around 0 for biases and around 1 for norm weights.
inline float random_value(std::uint64_t tensor_seed, std::uint64_t i, random_tensor::fill kind) {
  const double u = static_cast<double>(mix64(tensor_seed ^ mix64(i)) >> 11) * 0x1.0p-53;  // [0, 1)
  const double x = (2 * u - 1) * 0.02 * std::sqrt(3.0);
  return static_cast<float>(kind == random_tensor::fill::norm ? 1 + x : x);
}

inline void fill_random(const std::string& name, random_tensor::fill kind, std::uint64_t seed,
                        io::st_dtype dtype, std::span<std::byte> out, unsigned threads) {
  std::uint64_t tensor_seed = mix64(seed);
  for (const char c : name) tensor_seed = mix64(tensor_seed ^ static_cast<unsigned char>(c));
  const std::uint64_t n = out.size() / io::st_dtype_size(dtype);
  const auto fill = [&](std::uint64_t begin, std::uint64_t end) {
    for (std::uint64_t i = begin; i < end; ++i) {
      const float v = random_value(tensor_seed, i, kind);
      if (dtype == io::st_dtype::f32) {
        std::memcpy(out.data() + 4 * i, &v, 4);
      } else {
        const std::uint16_t bits = dtype == io::st_dtype::bf16 ? float_to_bf16(v) : float_to_f16(v);
        std::memcpy(out.data() + 2 * i, &bits, 2);
      }
    }
  };
  const std::uint64_t parts = n < (1u << 20) ? 1 : threads;
  std::vector<std::jthread> workers;
  for (std::uint64_t p = 1; p < parts; ++p) workers.emplace_back(fill, n * p / parts, n * (p + 1) / parts);
  fill(0, n / parts);
}

inline std::string random_config_json(const random_hf_model& m) {
  const std::string dtype = m.dtype == io::st_dtype::f32    ? "float32"
                            : m.dtype == io::st_dtype::bf16 ? "bfloat16"
                                                            : "float16";
  const auto n = [](std::int64_t v) { return std::to_string(v); };
  if (m.family == "gpt2")
    return "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
           "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n  \"n_embd\": " +
           n(m.model) + ",\n  \"n_head\": " + n(m.heads) +
           ",\n  \"n_inner\": null,\n  \"n_layer\": " + n(m.layers) +
           ",\n  \"n_positions\": " + n(m.positions) + ",\n  \"vocab_size\": " + n(m.vocab) +
           ",\n  \"attn_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"resid_pdrop\": 0.0,\n"
           "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"" +
           dtype + "\"\n}\n";
  return "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n  \"hidden_act\": "
         "\"silu\",\n"
         "  \"hidden_size\": " +
         n(m.model) + ",\n  \"intermediate_size\": " + n(m.ffn) +
         ",\n  \"num_attention_heads\": " + n(m.heads) + ",\n  \"num_key_value_heads\": " + n(m.kv_heads) +
         ",\n  \"num_hidden_layers\": " + n(m.layers) + ",\n  \"head_dim\": " + n(m.model / m.heads) +
         ",\n  \"max_position_embeddings\": " + n(m.positions) + ",\n  \"vocab_size\": " + n(m.vocab) +
         ",\n  \"rms_norm_eps\": 1e-06,\n  \"rope_theta\": 10000.0,\n  \"attention_bias\": false,\n"
         "  \"mlp_bias\": false,\n  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"" +
         dtype + "\"\n}\n";
}

}  // namespace detail

// Writes config.json and the random tensors of `m` as the directory `directory` (io::write_hf_checkpoint:
// replaced as a whole when complete); `log` (optional) hears of each file.
inline std::uint64_t write_random_hf_checkpoint(const std::string& directory, const random_hf_model& m,
                                                const std::function<void(const std::string&)>& log = {}) {
  const std::string where = "write_random_hf_checkpoint: " + directory;
  if (m.family != "gpt2" && m.family != "llama")
    fail(where, "family \"" + m.family + "\" is neither gpt2 nor llama", "give \"gpt2\" or \"llama\"");
  if (m.vocab < 1 || m.model < 1 || m.layers < 1 || m.heads < 1 || m.kv_heads < 1 || m.ffn < 1 ||
      m.positions < 1)
    fail(where, "every size must be positive",
         "give vocab, model, layers, heads, kv_heads, ffn and positions > 0");
  if (m.model % m.heads != 0 || m.heads % m.kv_heads != 0)
    fail(where, "heads must divide model and kv_heads must divide heads",
         "give sizes such as model 4096, heads 32, kv_heads 8");
  if (m.dtype != io::st_dtype::f32 && m.dtype != io::st_dtype::bf16 && m.dtype != io::st_dtype::f16)
    fail(where, "dtype " + std::string(io::st_dtype_name(m.dtype)) + " is not a weight dtype",
         "give F32, BF16 or F16");
  std::vector<io::hf_tensor_plan> plan;
  std::map<std::string, detail::random_tensor::fill> kinds;
  for (detail::random_tensor& t : detail::random_tensors(m)) {
    plan.push_back({t.name, m.dtype, t.shape});
    kinds.emplace(t.name, t.kind);
  }
  return io::write_hf_checkpoint(
      directory, detail::random_config_json(m), plan, m.max_file_bytes,
      [&](const io::hf_tensor_plan& t, std::span<std::byte> out) {
        detail::fill_random(t.name, kinds.at(t.name), m.seed, m.dtype, out, m.threads);
      },
      log);
}

}  // namespace shardgraph::examples
