#pragma once
// LLaMA, built from the DSL only: RMSNorm, rotary embeddings, grouped-query attention and a SwiGLU
// MLP, with Megatron-LM's tensor-parallel layout on the `tensor` axis (q/k/v/gate/up column
// parallel, o/down row parallel, vocab-parallel embedding and head) and the batch on `data`.
// Weights keep HF's (out, in) layout so checkpoints load without transposes.
//
//   input_ids --embed_tokens--> repeat "layers" x layers:
//       [ x + o_proj(attention(rope(q), rope(k), v)) ;  x + down(silu(gate h) * up h) ]
//   --norm--> logits = lm_head x ;  loss = cross_entropy(logits, targets)
#include <cstdint>
#include <string>
#include <string_view>

#include "shardgraph/dsl/ops.hpp"
#include "shardgraph/dsl/repeat.hpp"
#include "shardgraph/models/gpt2.hpp"
#include "shardgraph/runtime/model_sizes.hpp"

namespace shardgraph::models {

struct llama_options {
  dtype type = dtype::f32;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::string_view data_axis = "dp";
  std::string_view tensor_axis = "tp";
};

struct llama_config {
  std::int64_t vocab = 32000, model = 2048, ffn = 5632, heads = 32, kv_heads = 4, layers = 22;
  static constexpr llama_config tinyllama_1b() { return {}; }  // TinyLlama-1.1B shape
  model_sizes sizes(std::int64_t batch, std::int64_t seq) const {
    model_sizes s;
    s.set(size_symbol::batch, batch).set(size_symbol::seq, seq).set(size_symbol::vocab, vocab);
    s.set(size_symbol::positions, seq).set(size_symbol::model, model).set(size_symbol::ffn, ffn);
    s.set(size_symbol::heads, heads).set(size_symbol::kv_heads, kv_heads).set(size_symbol::layers, layers);
    if (heads > 0 && model % heads != 0)
      fail("llama_config",
           "model = " + std::to_string(model) + " is not divisible by heads = " + std::to_string(heads),
           "give a head count dividing the model width (num_attention_heads dividing hidden_size)");
    if (heads > 0) s.set(size_symbol::head_dim, model / heads);
    return s;
  }
};

template <class Mesh>
constexpr graph llama(llama_options o = {}) {
  using namespace shardgraph::dim;
  using detail::param_on;
  builder<Mesh> g(o.type);
  const std::string_view tp = o.tensor_axis;
  const weight_layout hf = weight_layout::out_in;

  auto data_input = [&](std::string_view name) {
    if (o.data_axis.empty()) return g.input(name, {batch, seq}, dtype::i64);
    return g.input(name, {batch, seq}, dtype::i64, detail::on_axis(o.data_axis, shard<0>));
  };
  tensor ids = data_input("input_ids");
  tensor targets = data_input("targets");
  tensor x = embedding(ids, param_on(g, "embed_tokens.weight", {vocab, model}, tp, shard<0>));

  x = repeat("layers", x, [&](graph_builder& b, tensor x) {
    b.push_scope("self_attn");
    tensor h = rms_norm(x, b.param("input_layernorm.weight", {model}), o.rms_norm_eps);
    auto column = [&](std::string_view w, extent heads_of) {
      return split_heads(linear(h, param_on(b, w, {heads_of * head_dim, model}, tp, shard<0>), hf));
    };
    tensor q = rope(column("self_attn.q_proj.weight", heads), o.rope_theta);
    tensor k = rope(column("self_attn.k_proj.weight", kv_heads), o.rope_theta);
    tensor v = column("self_attn.v_proj.weight", kv_heads);
    tensor a = merge_heads(attention(q, k, v));
    x = x + linear(a, param_on(b, "self_attn.o_proj.weight", {model, heads * head_dim}, tp, shard<1>), hf);
    b.pop_scope();
    b.push_scope("mlp");
    h = rms_norm(x, b.param("post_attention_layernorm.weight", {model}), o.rms_norm_eps);
    tensor gate = linear(h, param_on(b, "mlp.gate_proj.weight", {ffn, model}, tp, shard<0>), hf);
    tensor up = linear(h, param_on(b, "mlp.up_proj.weight", {ffn, model}, tp, shard<0>), hf);
    x = x + linear(silu(gate) * up, param_on(b, "mlp.down_proj.weight", {model, ffn}, tp, shard<1>), hf);
    b.pop_scope();
    return x;
  });

  x = rms_norm(x, g.param("norm.weight", {model}), o.rms_norm_eps);
  tensor logits = linear(x, param_on(g, "lm_head.weight", {vocab, model}, tp, shard<0>), hf);
  output(cross_entropy(logits, targets), "loss");
  output(logits, "logits");
  return g.finish();
}

}  // namespace shardgraph::models
