#pragma once
// LLaMA, built from the DSL only: RMSNorm, rotary embeddings, grouped-query attention and a SwiGLU
// MLP, with Megatron-LM's tensor-parallel layout on the `tensor` axis (q/k/v/gate/up column
// parallel, o/down row parallel, vocab-parallel embedding and head) and the batch on `data`.
// Weights keep HF's (out, in) layout so checkpoints load without transposes.
//
//   input_ids --embed_tokens--> repeat "layers" x layers:
//       [ x + o_proj(attention(rope(q), rope(k), v)) ;  x + down(silu(gate h) * up h) ]
//   --norm--> logits = lm_head x ;  loss = cross_entropy(logits, targets)
// Options: biases on the attention and MLP projections, and the head tied to embed_tokens.
#include <cstdint>
#include <string>
#include <string_view>

#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/dsl/ops.hpp"
#include "shardgraph/dsl/repeat.hpp"
#include "shardgraph/models/gpt2.hpp"

namespace shardgraph::models {

struct llama_options {
  dtype type = dtype::f32;
  double rms_norm_eps = 1e-6;
  rope_scaling rope = {};  // rope_theta and HF's RoPE scaling (ir/rope_scaling.hpp)
  std::string_view data_axis = "dp";
  std::string_view tensor_axis = "tp";
  bool tie_word_embeddings = false;  // true: logits = x embed_tokens^T, no lm_head.weight
  bool attention_bias = false;       // biases on q, k, v and o_proj (HF's attention_bias)
  bool mlp_bias = false;             // biases on gate, up and down_proj (HF's mlp_bias)
};

// vocab: the tokens; padded_vocab (0: none): the rows of the table and the head, padded so that they
// divide over tensor-parallel ranks (gpt2_config says how the padding is treated).
struct llama_config {
  std::int64_t vocab = 32000, model = 2048, ffn = 5632, heads = 32, kv_heads = 4, layers = 22;
  std::int64_t head_dim = 0;      // the size of one head (HF's head_dim); 0: model / heads
  std::int64_t padded_vocab = 0;  // the table's and the head's rows; 0: vocab
  static constexpr llama_config tinyllama_1b() { return {}; }  // TinyLlama-1.1B shape
  constexpr std::int64_t table_rows() const { return padded_vocab > 0 ? padded_vocab : vocab; }
  model_sizes sizes(std::int64_t batch, std::int64_t seq) const {
    model_sizes s;
    s.classes = vocab;
    s.set(size_symbol::batch, batch).set(size_symbol::seq, seq).set(size_symbol::vocab, table_rows());
    s.set(size_symbol::positions, seq).set(size_symbol::model, model).set(size_symbol::ffn, ffn);
    s.set(size_symbol::heads, heads).set(size_symbol::kv_heads, kv_heads).set(size_symbol::layers, layers);
    if (head_dim > 0) {
      s.set(size_symbol::head_dim, head_dim);  // HF's head_dim: independent of model / heads
    } else if (heads > 0) {
      if (model % heads != 0)
        fail("llama_config",
             "model = " + std::to_string(model) + " is not divisible by heads = " + std::to_string(heads),
             "give a head count dividing the model width (num_attention_heads dividing hidden_size), or "
             "head_dim");
      s.set(size_symbol::head_dim, model / heads);
    }
    return s;
  }
};

// The decoder on embeddings x (batch, seq, model), in the graph `g` is building: the layers, the
// final norm and the head; returns the logits (batch, seq, vocab). `table` (vocab, model) is the
// embedding, the head when o.tie_word_embeddings. x Partial on the tensor axis (a vocab-parallel
// embedding's output) or Replicate.
constexpr tensor llama_decoder(graph_builder& g, tensor x, tensor table, const llama_options& o) {
  using namespace shardgraph::dim;
  using detail::param_on;
  const std::string_view tp = o.tensor_axis;
  const weight_layout hf = weight_layout::out_in;
  // Without biases the residual stream stays Partial on tp through the layers (a norm sums it
  // where it needs it whole). A row-parallel projection's bias is added to the summed product, so
  // with biases the stream is Replicate: summed once here, then after each row-parallel product.
  if ((o.attention_bias || o.mlp_bias) && !tp.empty()) x = redistribute(x, detail::on_axis(tp, replicate));
  x = repeat("layers", x, [&](graph_builder& b, tensor x) {
    // A projection x w^T (+ b when `bias`): column parallel (w sharded by rows, the output's
    // columns) or row parallel (w sharded by columns; the output Partial, the bias added once).
    auto project = [&](tensor in, std::string_view w, extent out, extent from, bool column, bool bias) {
      tensor y = linear(in, param_on(b, w, {out, from}, tp, column ? shard<0> : shard<1>), hf);
      if (!bias) return y;
      std::string_view stem = w.substr(0, w.size() - std::string_view(".weight").size());
      name_buffer bias_name(stem);
      bias_name.append(".bias");
      return add_bias(
          y, column ? param_on(b, bias_name.view(), {out}, tp, shard<0>) : b.param(bias_name.view(), {out}));
    };
    b.push_scope("self_attn");
    tensor h = rms_norm(x, b.param("input_layernorm.weight", {model}), o.rms_norm_eps);
    auto column = [&](std::string_view w, extent heads_of) {
      return split_heads(project(h, w, heads_of * head_dim, model, true, o.attention_bias));
    };
    tensor q = rope(column("self_attn.q_proj.weight", heads), o.rope);
    tensor k = rope(column("self_attn.k_proj.weight", kv_heads), o.rope);
    tensor v = column("self_attn.v_proj.weight", kv_heads);
    tensor a = merge_heads(attention(q, k, v));
    x = x + project(a, "self_attn.o_proj.weight", model, heads * head_dim, false, o.attention_bias);
    b.pop_scope();
    b.push_scope("mlp");
    h = rms_norm(x, b.param("post_attention_layernorm.weight", {model}), o.rms_norm_eps);
    tensor gate = project(h, "mlp.gate_proj.weight", ffn, model, true, o.mlp_bias);
    tensor up = project(h, "mlp.up_proj.weight", ffn, model, true, o.mlp_bias);
    x = x + project(silu(gate) * up, "mlp.down_proj.weight", model, ffn, false, o.mlp_bias);
    b.pop_scope();
    return x;
  });

  x = rms_norm(x, g.param("norm.weight", {model}), o.rms_norm_eps);
  tensor head = o.tie_word_embeddings ? table : param_on(g, "lm_head.weight", {vocab, model}, tp, shard<0>);
  return rename(linear(x, head, hf), "lm_head");
}

template <class Mesh>
constexpr graph llama(llama_options o = {}) {
  using namespace shardgraph::dim;
  builder<Mesh> g(o.type);
  auto data_input = [&](std::string_view name) {
    if (o.data_axis.empty()) return g.input(name, {batch, seq}, dtype::i64);
    return g.input(name, {batch, seq}, dtype::i64, detail::on_axis(o.data_axis, shard<0>));
  };
  tensor ids = data_input("input_ids");
  tensor targets = data_input("targets");
  tensor table = detail::param_on(g, "embed_tokens.weight", {vocab, model}, o.tensor_axis, shard<0>);
  tensor logits = llama_decoder(g, embedding(ids, table), table, o);
  output(cross_entropy(logits, targets), "loss");
  output(logits, "logits");
  return g.finish();
}

}  // namespace shardgraph::models
