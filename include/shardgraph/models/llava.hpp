#pragma once
// LLaVA, built from the DSL only: HF's LlavaForConditionalGeneration, a CLIP vision tower, a
// projector and a LLaMA decoder.
//
//   pixel_values (batch, channels, image_size, image_size)
//     --vision_tower, its first unrolled_layers layers, no post_layernorm--> (batch, vision_seq,
//     vision_model)
//     --slice off the class token--> (batch, patches, vision_model)
//     --multi_modal_projector: linear_2(gelu_erf(linear_1 x))--> image_features (batch, patches, model)
//   input_ids (batch, seq) --embed_tokens--> (batch, seq, model), its first `patches` positions (the
//     image tokens) dropped: (batch, text_seq, model)
//   concat(image_features, text embeddings) (batch, seq, model) --llama_decoder--> logits (batch, seq, vocab)
//   loss = cross_entropy(logits, targets)
//
// HF replaces the embeddings of the image tokens (the first image_seq_length positions of every
// sequence here) by the image's features; concat does the same. vision_feature_layer -k reads the
// tower's states after its (layers - k + 1)-th layer, before post_layernorm: the tower is built with
// that many layers, unrolled (vit_options::unrolled_layers), since the runtime sizes every repeat
// block by the one `layers` size and the decoder is a repeat block of its own depth.
//
// Placement: the batch on the decoder's data axis for every input; the decoder in Megatron's layout
// on its tensor axis (llama); the tower and the projector on vision.tensor_axis (empty: replicated
// on every rank; "tp", or an axis of their own: Megatron's layout there, linear_1 column and
// linear_2 row parallel).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/dsl/combining.hpp"
#include "shardgraph/dsl/ops.hpp"
#include "shardgraph/models/llama.hpp"
#include "shardgraph/models/vit.hpp"

namespace shardgraph::models {

// The tower's own dimensions (the decoder holds the built-in ones), sized by llava_config::sizes,
// and the text after the image tokens.
namespace llava_dims {
inline constexpr extent vision_seq = dim::named<"vision_seq">;  // the class token and the patches
inline constexpr extent vision_model = dim::named<"vision_model">;
inline constexpr extent vision_heads = dim::named<"vision_heads">;
inline constexpr extent vision_head_dim = dim::named<"vision_head_dim">;
inline constexpr extent vision_ffn = dim::named<"vision_ffn">;
inline constexpr extent text_seq = dim::named<"text_seq">;  // seq - patches
}  // namespace llava_dims

// The CLIP vision tower as LLaVA reads it: CLIP's names, eps and quick_gelu, no patch bias, the
// tower's own dimensions, its first `layers` layers unrolled and no post_layernorm. Replicated on
// the tensor axis (tensor_axis = "tp" to shard it as the decoder).
constexpr vit_options llava_vision_tower(std::int64_t layers) {
  vit_names names = vit_names::hf_clip_vision();
  names.final_norm = "";
  return {.layer_norm_eps = 1e-5,
          .activation = vit_activation::quick_gelu,
          .patch_bias = false,
          .names = names,
          .dims = {.seq = llava_dims::vision_seq,
                   .positions = llava_dims::vision_seq,
                   .model = llava_dims::vision_model,
                   .heads = llava_dims::vision_heads,
                   .head_dim = llava_dims::vision_head_dim,
                   .ffn = llava_dims::vision_ffn},
          .data_axis = "",
          .tensor_axis = "",
          .unrolled_layers = layers};
}

// The defaults are a tiny LLaVA (tests/golden/llava: 2 of the tower's 3 layers read).
// vision.type, vision.data_axis and text.type are not read: the model's dtype is `type`, and every
// input is sharded by its batch on text.data_axis.
struct llava_options {
  dtype type = dtype::f32;
  vit_options vision = llava_vision_tower(2);
  llama_options text = {};
  vit_activation projector_activation = vit_activation::gelu_erf;  // HF's projector_hidden_act "gelu"
  bool projector_bias = true;                                      // HF's multimodal_projector_bias
};

// The sizes of the two transformers. vision.layers is the checkpoint's (the model runs the
// options' vision.unrolled_layers of them); vision.labels is not read. The defaults: the golden case.
struct llava_config {
  vit_config vision = {.image_size = 8,
                       .patch_size = 4,
                       .channels = 3,
                       .model = 24,
                       .heads = 12,
                       .layers = 3,
                       .ffn = 24,
                       .labels = 0};
  llama_config text = {
      .vocab = 61, .model = 48, .ffn = 24, .heads = 12, .kv_heads = 6, .layers = 1, .head_dim = 4};

  // The image tokens that open every sequence: one a patch (HF's image_seq_length).
  std::int64_t image_tokens() const { return vision.patches(); }

  // `seq` counts the image tokens and the text after them; refused unless the text is not empty.
  model_sizes sizes(std::int64_t batch, std::int64_t seq) const {
    const std::int64_t patches = vision.patches();
    if (seq <= patches)
      fail("llava_config",
           "seq = " + std::to_string(seq) + " leaves no text after the " + std::to_string(patches) +
               " image tokens",
           "give sequences longer than the image's patches (image_size / patch_size)^2");
    if (vision.heads <= 0 || vision.model % vision.heads != 0)
      fail("llava_config",
           "vision.model = " + std::to_string(vision.model) +
               " is not divisible by vision.heads = " + std::to_string(vision.heads),
           "give a head count dividing the tower's width (vision_config's num_attention_heads dividing "
           "hidden_size)");
    model_sizes s = text.sizes(batch, seq);
    s.set("patches", patches).set("text_seq", seq - patches);
    s.set("channels", vision.channels)
        .set("image_size", vision.image_size)
        .set("patch_size", vision.patch_size);
    const std::int64_t area =
        checked_multiply(vision.patch_size, vision.patch_size, "llava_config: patch_size^2");
    s.set("patch_features", checked_multiply(vision.channels, area, "llava_config: channels * patch_size^2"));
    s.set("vision_seq", checked_add(patches, 1, "llava_config: vision tokens"));  // the class token first
    s.set("vision_model", vision.model).set("vision_heads", vision.heads);
    s.set("vision_head_dim", vision.model / vision.heads).set("vision_ffn", vision.ffn);
    return s;
  }
};

namespace detail {
// HF's multi_modal_projector: linear_2(act(linear_1 x)), x (batch, patches, vision_model) ->
// (batch, patches, model). On the tower's tensor axis, linear_1 column and linear_2 row parallel.
constexpr tensor llava_projector(graph_builder& g, tensor x, const llava_options& o) {
  const std::string_view tp = o.vision.tensor_axis;
  const weight_layout hf = weight_layout::out_in;
  tensor h = linear(x,
                    param_on(g, "multi_modal_projector.linear_1.weight",
                             {dim::model, llava_dims::vision_model}, tp, shard<0>),
                    hf);
  if (o.projector_bias)
    h = add_bias(h, param_on(g, "multi_modal_projector.linear_1.bias", {dim::model}, tp, shard<0>));
  tensor y = linear(
      apply_activation(h, o.projector_activation),
      param_on(g, "multi_modal_projector.linear_2.weight", {dim::model, dim::model}, tp, shard<1>), hf);
  if (o.projector_bias) y = add_bias(y, g.param("multi_modal_projector.linear_2.bias", {dim::model}));
  return y;
}
}  // namespace detail

// LLaVA's language model alone: models::llama with the decoder's options in the model's type. Its
// parameters are llava()'s decoder's, by name and placement (embed_tokens, layers, norm,
// lm_head), and so are the caches of its generation program: that program is LLaVA's decode step,
// which reads neither the image nor the tower (generate/image_generation.hpp).
constexpr llama_options llava_language_model(const llava_options& o) {
  llama_options text = o.text;
  text.type = o.type;
  return text;
}

// The graph capacity llava() builds with unless told otherwise: enough for a tower of a few
// unrolled layers, forward, backward and collectives.
inline constexpr std::size_t llava_graph_capacity = 512;

// LlavaForConditionalGeneration. Inputs: pixel_values (batch, channels, image_size, image_size) in
// `type`, input_ids (batch, seq) i64 whose first `patches` positions are image tokens (their ids are
// not read), targets (batch, seq) i64 (-100: not scored). Outputs: loss, logits (batch, seq, vocab)
// and image_features (batch, patches, model). Parameters: the tower's under CLIP's names
// ("encoder.layers.0.self_attn.q_proj.weight"), the projector's ("multi_modal_projector.linear_1.weight")
// and the decoder's as models::llama's ("layers.0.mlp.up_proj.weight", "lm_head.weight");
// io::hf_llava_weights maps them to HF's. Capacity: the graph's nodes; the training graph of the
// golden model (a tower of 2 unrolled layers, on tp) holds 418, and each further unrolled layer
// adds 112 (40 to a forward program).
template <class Mesh, std::size_t Capacity = llava_graph_capacity>
constexpr basic_graph<Capacity> llava(llava_options o = {}) {
  using namespace shardgraph::dim;
  builder<Mesh, Capacity> g(o.type);
  const std::string_view dp = o.text.data_axis;
  auto data_input = [&](std::string_view name, shape s, dtype t) {
    if (dp.empty()) return g.input(name, s, t);
    return g.input(name, s, t, detail::on_axis(dp, shard<0>));
  };
  tensor pixels = data_input("pixel_values",
                             {batch, vit_dims::channels, vit_dims::image_size, vit_dims::image_size}, o.type);
  tensor ids = data_input("input_ids", {batch, seq}, dtype::i64);
  tensor targets = data_input("targets", {batch, seq}, dtype::i64);
  if (o.vision.unrolled_layers <= 0)
    if (diagnostic* d = g.value().report(pixels.id))
      *d << "llava: vision.unrolled_layers is " << static_cast<int>(o.vision.unrolled_layers)
         << ", but the tower's layers are built one by one. set it to the layers the image features "
            "come from (llava_vision_tower(layers); io::hf_llava_options reads it from vision_feature_layer)";

  tensor states = vision_tower(g, pixels, o.vision);  // (batch, vision_seq, vision_model)
  tensor features = detail::llava_projector(g, slice(states, 1, 1, vit_dims::patches), o);
  output(features, "image_features");
  tensor table = detail::param_on(g, "embed_tokens.weight", {vocab, model}, o.text.tensor_axis, shard<0>);
  tensor text = slice(embedding(ids, table), 1, vit_dims::patches, llava_dims::text_seq);
  tensor logits = llama_decoder(g, concat({features, text}, 1, seq), table, o.text);
  output(cross_entropy(logits, targets), "loss");
  output(logits, "logits");
  return g.finish();
}

}  // namespace shardgraph::models
