#pragma once
// A HF checkpoint directory opened as a shardgraph model, whatever its family: config.json's
// "model_type" picks GPT-2 or LLaMA; the program is compiled at run time over hf_mesh, with the
// checkpoint's options (eps, RoPE, biases, tied head: hf_config.hpp); the weights read from
// its safetensors files.
//
//   sg::io::hf_model m = sg::io::open_hf_model("gpt2-dir", {.type = sg::dtype::bf16, .vocab_multiple = tp});
//   auto rank = sg::bind(m.program, m.sizes(batch, seq), comm, backend, mesh, m.weights(bytes_read));
//
// m.generation is the same model compiled with inference{.kv_cache = true} (the prefill and decode
// program of generate/runner.hpp); m.attention holds what sizes its KV cache per token.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/core/weight_source.hpp"
#include "shardgraph/io/hf_config.hpp"
#include "shardgraph/io/hf_eos_tokens.hpp"
#include "shardgraph/io/hf_expected_tensors.hpp"
#include "shardgraph/io/hf_rope.hpp"
#include "shardgraph/io/hf_weights.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/io/safetensors_checkpoint.hpp"
#include "shardgraph/models/gpt2.hpp"
#include "shardgraph/models/llama.hpp"
#include "shardgraph/passes/compile.hpp"

namespace shardgraph::io {

// The mesh HF models are compiled over: batch on dp, Megatron's layout on tp, layers over pp.
using hf_mesh = mesh<"dp", "tp", "pp">;

struct hf_model_options {
  dtype type = dtype::f32;          // the dtype the model computes and holds its weights in
  std::int64_t vocab_multiple = 1;  // the vocabulary is padded with zero rows to a multiple of this (tp)
  // A tensor in the files that no parameter reads (an extra layer, an unknown name) is an error
  // unless this is set; the shapes and dtypes of the tensors read are checked either way.
  bool allow_unused_tensors = false;
};

// What one token's keys and values take in the whole model (before tp shards the kv heads).
struct hf_attention_sizes {
  std::int64_t layers = 0;
  std::int64_t kv_heads = 0;  // LLaMA's num_key_value_heads; GPT-2's n_head
  std::int64_t head_dim = 0;
  std::int64_t dtype_bytes = 0;  // of hf_model_options::type
};

struct hf_model {
  std::string family;      // "gpt2" or "llama"
  std::int64_t vocab = 0;  // the checkpoint's; the model's is padded to a multiple of vocab_multiple
  std::int64_t padded_vocab = 0;
  std::int64_t positions = 0;  // GPT-2: n_positions; LLaMA: max_position_embeddings (0 if absent)
  program layout;              // inference over hf_mesh: dp, tp and pp as the mesh gives them
  program single;              // the same model on one rank (no parallel axes)
  // inference{.kv_cache = true} over hf_mesh: prefill and decode steps that write and read a paged
  // KV cache (runtime/kv_cache.hpp), the program generate::run_generation drives
  program generation;
  hf_attention_sizes attention;          // what sizes a rank's cache (kv heads, head_dim, layers)
  std::vector<std::int64_t> eos_tokens;  // hf_eos_tokens: where generation stops by default
  std::function<model_sizes(std::int64_t batch, std::int64_t seq)> sizes;
  std::function<weight_source(std::shared_ptr<std::atomic<std::uint64_t>> bytes_read)> weights;
};

namespace detail {
inline std::int64_t round_up(std::int64_t n, std::int64_t to) {
  return checked_add(n, to - 1, "open_hf_model: the vocabulary padded to vocab_multiple") / to * to;
}

// The config's sizes as far as its tensors are listed: a layer count past the files' tensor count
// cannot match them (every layer has several tensors), so the list stops there and the check names
// the first missing layer's tensor, however many layers the config claims.
template <class Config>
Config listed_sizes(Config c, std::size_t tensors_in_files) {
  c.layers = std::min(c.layers, static_cast<std::int64_t>(tensors_in_files));
  return c;
}
}  // namespace detail

// The tensors the config.json at `config_path` implies, named as export_hf writes them: GPT-2's with
// "transformer.", an untied head as lm_head.weight. `max_layers` bounds the list (a config
// claiming more layers is refused on the first missing one).
inline std::vector<hf_tensor_spec> hf_config_tensors(const std::string& config_path, std::size_t max_layers) {
  const json::value config = read_json_file(config_path);
  const json::value* type = config.find("model_type");
  const std::string family = type && type->type() == json::kind::string ? type->as_string() : "";
  if (family == "gpt2") {
    const models::gpt2_options options = hf_gpt2_options(config);
    const models::gpt2_config c = hf_gpt2_config(config_path, options);
    return hf_gpt2_tensors(detail::listed_sizes(c, max_layers), "transformer.", options.tie_word_embeddings);
  }
  if (family == "llama") {
    const models::llama_options options = hf_llama_options(config_path, config);
    const models::llama_config c = hf_llama_config(config_path, options);
    return hf_llama_tensors(detail::listed_sizes(c, max_layers), options);
  }
  fail(config_path, "model_type is not \"gpt2\" or \"llama\"",
       "give the config.json of a GPT-2 or LLaMA model");
}

// Opens `directory` (config.json and model.safetensors, or model.safetensors.index.json and its
// files). Throws, naming config.json, for a family shardgraph does not model; naming the file and
// the tensor, for a tensor missing from the files or of another shape or dtype than config.json
// implies (hf_gpt2_tensors, hf_llama_tensors); and, unless o.allow_unused_tensors, for tensors in
// the files that no parameter reads. These checks read only the files' headers.
inline hf_model open_hf_model(const std::string& directory, const hf_model_options& o = {}) {
  const std::string config_path = directory + "/config.json";
  const json::value config = read_json_file(config_path);
  const json::value* type = config.find("model_type");
  if (type == nullptr || type->type() != json::kind::string)
    fail(config_path, "has no \"model_type\"", "give a GPT-2 or LLaMA config.json");
  if (o.vocab_multiple < 1)
    fail("open_hf_model: vocab_multiple", std::to_string(o.vocab_multiple) + " is not positive",
         "give the tensor-parallel size, or 1");
  auto checkpoint = safetensors_checkpoint::open(directory);
  hf_model m;
  m.family = type->as_string();
  m.eos_tokens = hf_eos_tokens(directory);
  if (m.family == "gpt2") {
    const models::gpt2_options opts = hf_gpt2_options(config, {.type = o.type});
    models::gpt2_config c = hf_gpt2_config(config_path, opts);
    const std::vector<hf_found_tensor> found = hf_tensors_of(*checkpoint);
    check_hf_tensors(found,
                     hf_gpt2_tensors(detail::listed_sizes(c, found.size()), hf_gpt2_prefix(*checkpoint),
                                     opts.tie_word_embeddings),
                     checkpoint->where(), config_path, o.allow_unused_tensors);
    m.vocab = c.vocab;
    m.positions = c.positions;
    c.padded_vocab = m.padded_vocab = detail::round_up(c.vocab, o.vocab_multiple);
    m.layout = compile_graph(models::gpt2<hf_mesh>(opts), inference{});
    m.generation = compile_graph(models::gpt2<hf_mesh>(opts), inference{.kv_cache = true});
    m.attention = {c.layers, c.heads, c.model / c.heads, static_cast<std::int64_t>(dtype_size(o.type))};
    models::gpt2_options one_rank = opts;
    one_rank.data_axis = one_rank.tensor_axis = "";
    m.single = compile_graph(models::gpt2<hf_mesh>(one_rank));
    m.sizes = [c, config_path](std::int64_t batch, std::int64_t seq) {
      if (seq > c.positions)
        fail(config_path,
             std::to_string(seq) + " tokens is more than the model's " + std::to_string(c.positions) +
                 " positions (n_positions)",
             "give at most n_positions tokens");
      return c.sizes(batch, seq);
    };
    m.weights = [checkpoint, d = c.model, v = m.vocab](auto bytes) {
      return hf_gpt2_weights(checkpoint, d, bytes, v);
    };
  } else if (m.family == "llama") {
    const models::llama_options opts = hf_llama_options(config_path, config, {.type = o.type});
    models::llama_config c = hf_llama_config(config_path, opts);
    const std::vector<hf_found_tensor> found = hf_tensors_of(*checkpoint);
    check_hf_tensors(found,
                     hf_llama_tensors(detail::listed_sizes(c, found.size()), opts),
                     checkpoint->where(), config_path, o.allow_unused_tensors);
    m.vocab = c.vocab;
    if (const json::value* p = config.find("max_position_embeddings"); p && !p->is_null())
      m.positions = p->as_int();
    c.padded_vocab = m.padded_vocab = detail::round_up(c.vocab, o.vocab_multiple);
    m.layout = compile_graph(models::llama<hf_mesh>(opts), inference{});
    m.generation = compile_graph(models::llama<hf_mesh>(opts), inference{.kv_cache = true});
    m.attention = {c.layers, c.kv_heads, c.head_dim > 0 ? c.head_dim : c.model / c.heads,
                   static_cast<std::int64_t>(dtype_size(o.type))};
    models::llama_options one_rank = opts;
    one_rank.data_axis = one_rank.tensor_axis = "";
    m.single = compile_graph(models::llama<hf_mesh>(one_rank));
    m.sizes = [c](std::int64_t batch, std::int64_t seq) { return c.sizes(batch, seq); };
    m.weights = [checkpoint, v = m.vocab](auto bytes) { return hf_llama_weights(checkpoint, bytes, v); };
  } else {
    fail(config_path, "model_type \"" + m.family + "\" is not a family shardgraph models",
         "give a \"gpt2\" or \"llama\" checkpoint");
  }
  return m;
}

}  // namespace shardgraph::io
