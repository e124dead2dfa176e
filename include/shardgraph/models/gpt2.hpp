#pragma once
// GPT-2, built from the DSL only, with Megatron-LM's tensor-parallel layout on the `tensor` axis
// and the batch split on the `data` axis:
//
//   input_ids (batch, seq) --embedding(wte, vocab-parallel)--> + wpe
//     --repeat "h" x layers: [ x + c_proj(attention(split q,k,v (column parallel))) (row parallel)
//                              x + mlp.c_proj(gelu(c_fc(ln_2 x))) ] --ln_f--> logits = x wte^T
//   (or x lm_head^T with tie_word_embeddings = false)
//   loss = cross_entropy(logits, targets)
//
// Attention q, k, v are separate (model, model) weights; HF's fused c_attn is split on load.
// Sizes are chosen at bind from gpt2_config; the options here are fixed at compile time.
#include <cstdint>
#include <string>
#include <string_view>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/dsl/ops.hpp"
#include "shardgraph/dsl/repeat.hpp"

namespace shardgraph::models {

struct gpt2_options {
  dtype type = dtype::f32;
  double layer_norm_eps = 1e-5;
  std::string_view data_axis = "dp";    // empty: no data parallelism in this mesh
  std::string_view tensor_axis = "tp";  // empty: no tensor parallelism in this mesh
  // true: logits = x wte^T (GPT-2's tied head); false: a separate lm_head.weight (vocab, model).
  bool tie_word_embeddings = true;
  // true: attention scores scaled by 1/sqrt(head_dim); false: unscaled (HF's scale_attn_weights).
  bool scale_attn_weights = true;
};

// GPT-2's vocabulary is 50257 tokens; small() and medium() pad the table and the logits to 50304 rows
// (a multiple of 128, as llm.c and Megatron-LM do) so that they divide evenly over tensor-parallel
// ranks. The padding rows are never a token: the loss leaves their logits out of the softmax, and
// ids and targets must lie below `vocab`. padded_vocab 0: no padding.
struct gpt2_config {
  std::int64_t vocab = 50257, positions = 1024, model = 768, heads = 12, layers = 12;
  std::int64_t ffn = 0;           // the MLP width (HF's n_inner); 0: 4 * model
  std::int64_t padded_vocab = 0;  // the table's rows; 0: vocab
  static constexpr gpt2_config small() { return {.padded_vocab = 50304}; }  // 124M parameters
  static constexpr gpt2_config medium() {                                   // 350M
    return {.model = 1024, .heads = 16, .layers = 24, .padded_vocab = 50304};
  }
  // Rows of the embedding table and columns of the logits.
  constexpr std::int64_t table_rows() const { return padded_vocab > 0 ? padded_vocab : vocab; }
  model_sizes sizes(std::int64_t batch, std::int64_t seq) const {
    model_sizes s;
    s.set(size_symbol::batch, batch).set(size_symbol::seq, seq).set(size_symbol::vocab, table_rows());
    s.set(size_symbol::positions, positions).set(size_symbol::model, model).set(size_symbol::heads, heads);
    s.set(size_symbol::kv_heads, heads).set(size_symbol::layers, layers);
    s.set(size_symbol::ffn, ffn > 0     ? ffn
                            : model > 0 ? checked_multiply(4, model, "gpt2_config: ffn = 4 * model")
                                        : model);
    if (heads > 0 && model % heads != 0)
      fail("gpt2_config",
           "model = " + std::to_string(model) + " is not divisible by heads = " + std::to_string(heads),
           "give a head count dividing the model width (n_head dividing n_embd)");
    if (heads > 0) s.set(size_symbol::head_dim, model / heads);
    s.classes = vocab;
    return s;
  }
};

namespace detail {
// An annotation on `axis` if the model uses that axis, else one that names no axis (ignored).
constexpr axis_placement on_axis(std::string_view axis, placement p) { return {name_buffer(axis), p}; }

constexpr tensor param_on(graph_builder& g, std::string_view name, shape s, std::string_view axis, placement p) {
  if (axis.empty()) return g.param(name, s);
  return g.param(name, s, on_axis(axis, p));
}
}  // namespace detail

template <class Mesh>
constexpr graph gpt2(gpt2_options o = {}) {
  using namespace shardgraph::dim;
  using detail::param_on;
  builder<Mesh> g(o.type);
  const std::string_view tp = o.tensor_axis;
  const extent attn = heads * head_dim;

  auto data_input = [&](std::string_view name) {
    if (o.data_axis.empty()) return g.input(name, {batch, seq}, dtype::i64);
    return g.input(name, {batch, seq}, dtype::i64, detail::on_axis(o.data_axis, shard<0>));
  };
  tensor ids = data_input("input_ids");
  tensor targets = data_input("targets");
  tensor wte = param_on(g, "wte.weight", {vocab, model}, tp, shard<0>);
  tensor wpe = g.param("wpe.weight", {positions, model});
  tensor x = position_embedding(embedding(ids, wte), wpe);

  x = repeat("h", x, [&](graph_builder& b, tensor x) {
    b.push_scope("attn");
    tensor h = layer_norm(x, b.param("ln_1.weight", {model}), b.param("ln_1.bias", {model}), o.layer_norm_eps);
    auto column = [&](std::string_view w, std::string_view bias) {
      return linear(h, param_on(b, w, {model, attn}, tp, shard<1>), param_on(b, bias, {attn}, tp, shard<0>));
    };
    tensor q = split_heads(column("attn.q.weight", "attn.q.bias"));
    tensor k = split_heads(column("attn.k.weight", "attn.k.bias"));
    tensor v = split_heads(column("attn.v.weight", "attn.v.bias"));
    tensor a = merge_heads(attention(q, k, v, o.scale_attn_weights ? 0.0 : 1.0));
    a = linear(a, param_on(b, "attn.c_proj.weight", {attn, model}, tp, shard<0>), b.param("attn.c_proj.bias", {model}));
    x = x + a;
    b.pop_scope();
    b.push_scope("mlp");
    h = layer_norm(x, b.param("ln_2.weight", {model}), b.param("ln_2.bias", {model}), o.layer_norm_eps);
    h = gelu(linear(h, param_on(b, "mlp.c_fc.weight", {model, ffn}, tp, shard<1>),
                    param_on(b, "mlp.c_fc.bias", {ffn}, tp, shard<0>)));
    h = linear(h, param_on(b, "mlp.c_proj.weight", {ffn, model}, tp, shard<0>), b.param("mlp.c_proj.bias", {model}));
    x = x + h;
    b.pop_scope();
    return x;
  });

  x = layer_norm(x, g.param("ln_f.weight", {model}), g.param("ln_f.bias", {model}), o.layer_norm_eps);
  // tied: logits = x wte^T; untied: x lm_head^T, lm_head (vocab, model) vocab-parallel as wte
  tensor head = o.tie_word_embeddings ? wte : param_on(g, "lm_head.weight", {vocab, model}, tp, shard<0>);
  tensor logits = rename(linear(x, head, weight_layout::out_in), "lm_head");
  output(cross_entropy(logits, targets), "loss");
  output(logits, "logits");
  return g.finish();
}

}  // namespace shardgraph::models
