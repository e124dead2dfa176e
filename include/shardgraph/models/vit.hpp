#pragma once
// A vision transformer, built from the DSL only: HF's ViTForImageClassification, and with other
// options and names the CLIP vision tower (the image encoder of LLaVA). Megatron-LM's
// tensor-parallel layout on the `tensor` axis (q, k, v and fc1 column parallel, o and fc2 row
// parallel), the batch on `data`. Weights keep HF's (out, in) layout.
//
//   pixel_values (batch, channels, image_size, image_size)
//     --patchify, x projection^T (+ bias): HF's Conv2d of stride = kernel--> (batch, patches, model)
//     --class token prepended--> (batch, seq = 1 + patches, model) --+ position embeddings
//     --[pre_layrnorm, CLIP]--> repeat "layers" x layers:
//         [ x + o(attention(q, k, v, bidirectional)) ;  x + fc2(act(fc1 x)) ]   (pre-LayerNorm)
//     --final LayerNorm--> last_hidden_state (batch, seq, model)
//   ViT's head: logits = classifier(last_hidden_state[:, 0]) (batch, 1, labels);
//               loss = cross_entropy(logits, labels (batch, 1))
//
// vision_tower() builds the encoder into a caller's graph (LLaVA feeds its states to a projector);
// vit() is the whole classifier. Sizes are chosen at bind from vit_config.
#include <cstdint>
#include <string>
#include <string_view>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/dsl/convolution.hpp"
#include "shardgraph/dsl/ops.hpp"
#include "shardgraph/dsl/repeat.hpp"
#include "shardgraph/models/gpt2.hpp"

namespace shardgraph::models {

// The activation of the MLP (HF's hidden_act): "gelu" is the exact erf form (ViT), "gelu_new" the
// tanh approximation, "quick_gelu" x sigmoid(1.702 x) (CLIP's vision tower).
enum class vit_activation { gelu_erf, gelu_tanh, quick_gelu };
// x through the activation a.
constexpr tensor activated(tensor x, vit_activation a) {
  switch (a) {
    case vit_activation::gelu_tanh: return gelu(x);
    case vit_activation::quick_gelu: return quick_gelu(x);
    default: return gelu_erf(x);
  }
}

// Parameter names: HF's module names below the model's prefix ("vit." in ViTForImageClassification,
// "vision_tower." in LLaVA; the weight source adds it). Class token and positions are whole
// names; the others are modules, read as "<module>.weight" and "<module>.bias". An empty
// pre_norm, final_norm or classifier: the model has none.
struct vit_names {
  std::string_view class_token = "embeddings.cls_token";
  std::string_view positions = "embeddings.position_embeddings";
  std::string_view patch_projection = "embeddings.patch_embeddings.projection";
  std::string_view pre_norm = "";
  std::string_view layers = "layers";  // the repeated block: "<layers>.<i>.<module>.weight"
  std::string_view q = "attention.q_proj", k = "attention.k_proj", v = "attention.v_proj";
  std::string_view o = "attention.o_proj";
  std::string_view norm_before = "layernorm_before", norm_after = "layernorm_after";
  std::string_view fc1 = "mlp.fc1", fc2 = "mlp.fc2";
  std::string_view final_norm = "layernorm";
  std::string_view classifier = "classifier";  // outside the model's prefix, as HF saves it

  // ViTForImageClassification's names (transformers 5).
  static constexpr vit_names hf_vit() { return {}; }
  // CLIPVisionTransformer's names: a class embedding, pre_layrnorm, "encoder.layers", no head.
  static constexpr vit_names hf_clip_vision() {
    return {.class_token = "embeddings.class_embedding",
            .positions = "embeddings.position_embedding.weight",
            .patch_projection = "embeddings.patch_embedding",
            .pre_norm = "pre_layrnorm",
            .layers = "encoder.layers",
            .q = "self_attn.q_proj",
            .k = "self_attn.k_proj",
            .v = "self_attn.v_proj",
            .o = "self_attn.out_proj",
            .norm_before = "layer_norm1",
            .norm_after = "layer_norm2",
            .final_norm = "post_layernorm",
            .classifier = ""};
  }
};

// The tower's dimensions: the built-in ones for a ViT alone (vit_config::sizes sizes them). A model
// that holds a second transformer of another width (LLaVA's decoder) names the tower's own
// (`dim::named<"vision_model">`, ...) and sizes them itself.
struct vit_extents {
  extent seq = dim::seq;  // the tokens: the class token and the patches
  extent positions = dim::positions;
  extent model = dim::model, heads = dim::heads, head_dim = dim::head_dim, ffn = dim::ffn;
};

struct vit_options {
  dtype type = dtype::f32;
  double layer_norm_eps = 1e-12;  // ViT's; CLIP's is 1e-5
  vit_activation activation = vit_activation::gelu_erf;
  bool qkv_bias = true;    // biases on q, k and v (HF's qkv_bias); o, fc1 and fc2 always have theirs
  bool patch_bias = true;  // a bias on the patch projection: ViT's; CLIP's has none
  vit_names names = vit_names::hf_vit();
  vit_extents dims = {};
  std::string_view data_axis = "dp";    // empty: no data parallelism in this mesh
  std::string_view tensor_axis = "tp";  // empty: no tensor parallelism in this mesh
  // > 0: the encoder is this many layers built one by one, their weights "<layers>.<i>.<module>",
  // instead of one repeat block. The runtime sizes every repeat block by the one `layers` size, so
  // a tower inside a model with a second repeated stack of another depth (LLaVA's decoder), or a
  // tower that runs fewer layers than its checkpoint holds (LLaVA's vision_feature_layer), is
  // unrolled. Each layer adds its nodes to the graph.
  std::int64_t unrolled_layers = 0;
};

// Images of image_size x image_size pixels in patch_size x patch_size patches; `labels` classes.
struct vit_config {
  std::int64_t image_size = 224, patch_size = 16, channels = 3, model = 768, heads = 12, layers = 12,
               ffn = 3072, labels = 1000;
  static constexpr vit_config base_patch16_224() { return {}; }  // ViT-B/16, 86M parameters

  // The patches of one image; refused unless the patch size divides the image's side.
  std::int64_t patches() const {
    if (patch_size <= 0 || image_size <= 0 || image_size % patch_size != 0)
      fail("vit_config",
           "patch_size = " + std::to_string(patch_size) +
               " does not divide image_size = " + std::to_string(image_size),
           "give a positive patch size dividing the image's side");
    const std::int64_t side = image_size / patch_size;
    return checked_multiply(side, side, "vit_config: patches");
  }
  model_sizes sizes(std::int64_t batch) const {
    if (heads <= 0 || model % heads != 0)
      fail("vit_config",
           "model = " + std::to_string(model) + " is not divisible by heads = " + std::to_string(heads),
           "give a head count dividing the model width (num_attention_heads dividing hidden_size)");
    const std::int64_t tokens = checked_add(patches(), 1, "vit_config: tokens");  // the class token first
    model_sizes s;
    s.set(size_symbol::batch, batch).set(size_symbol::seq, tokens).set(size_symbol::positions, tokens);
    s.set(size_symbol::model, model).set(size_symbol::ffn, ffn).set(size_symbol::layers, layers);
    s.set(size_symbol::heads, heads)
        .set(size_symbol::kv_heads, heads)
        .set(size_symbol::head_dim, model / heads);
    s.set("patches", patches()).set("labels", labels);
    s.set("channels", channels).set("image_size", image_size).set("patch_size", patch_size);
    const std::int64_t area = checked_multiply(patch_size, patch_size, "vit_config: patch_size^2");
    s.set("patch_features", checked_multiply(channels, area, "vit_config: channels * patch_size^2"));
    return s;
  }
};

namespace vit_dims {
inline constexpr extent patches = dim::named<"patches">;
inline constexpr extent labels = dim::named<"labels">;
inline constexpr extent channels = dim::named<"channels">;
inline constexpr extent image_size = dim::named<"image_size">;
inline constexpr extent patch_size = dim::named<"patch_size">;
inline constexpr extent patch_features = dim::named<"patch_features">;  // channels * patch_size^2
}  // namespace vit_dims

namespace detail {
// "<stem>.<suffix>" as a parameter name.
constexpr name_buffer joined(std::string_view stem, std::string_view suffix) {
  name_buffer n(stem);
  n.append(".");
  n.append(suffix);
  return n;
}
// "<stem>.<i>" for i >= 0: a layer's name.
constexpr name_buffer numbered(std::string_view stem, std::int64_t i) {
  char digits[20]{};
  int count = 0;
  do {
    digits[count++] = static_cast<char>('0' + i % 10);
    i /= 10;
  } while (i > 0);
  name_buffer n(stem);
  n.append(".");
  while (count > 0) n.append(std::string_view(&digits[--count], 1));
  return n;
}

// One pre-LayerNorm encoder layer on x (batch, seq, model) -> (batch, seq, model). Its parameters
// are named "<prefix><module>.weight": prefix empty inside repeat() (the block adds its name),
// "<layers>.<i>." for a layer built on its own.
constexpr tensor vision_layer(graph_builder& b, tensor x, const vit_options& o, std::string_view prefix) {
  using detail::param_on;
  const std::string_view tp = o.tensor_axis;
  const vit_names& nm = o.names;
  const extent model = o.dims.model, heads = o.dims.heads, head_dim = o.dims.head_dim, ffn = o.dims.ffn;
  auto name = [&](std::string_view stem, std::string_view part) {
    name_buffer n(prefix);
    n.append(stem);
    n.append(".");
    n.append(part);
    return n;
  };
  auto norm = [&](tensor in, std::string_view stem) {
    return layer_norm(in, b.param(name(stem, "weight").view(), {model}),
                      b.param(name(stem, "bias").view(), {model}), o.layer_norm_eps);
  };
  // x w^T + b: column parallel (w sharded by rows, the output's columns) or row parallel (w
  // sharded by columns, the output Partial and the bias added once to the sum).
  auto project = [&](tensor in, std::string_view stem, extent out, extent from, bool column, bool bias) {
    tensor y =
        linear(in, param_on(b, name(stem, "weight").view(), {out, from}, tp, column ? shard<0> : shard<1>),
               weight_layout::out_in);
    if (!bias) return y;
    return add_bias(y, column ? param_on(b, name(stem, "bias").view(), {out}, tp, shard<0>)
                              : b.param(name(stem, "bias").view(), {out}));
  };
  b.push_scope("attention");
  tensor h = norm(x, nm.norm_before);
  auto heads_of = [&](std::string_view stem) {
    return split_heads(project(h, stem, heads * head_dim, model, true, o.qkv_bias));
  };
  tensor a = merge_heads(attention(heads_of(nm.q), heads_of(nm.k), heads_of(nm.v), {.causal = false}));
  x = x + project(a, nm.o, model, heads * head_dim, false, true);
  b.pop_scope();
  b.push_scope("mlp");
  h = project(norm(x, nm.norm_after), nm.fc1, ffn, model, true, true);
  x = x + project(activated(h, o.activation), nm.fc2, model, ffn, false, true);
  b.pop_scope();
  return x;
}
}  // namespace detail

// The encoder of `pixels` (batch, channels, image_size, image_size) in the graph `g` is building:
// the states (batch, seq, model) after the final LayerNorm (none when names.final_norm is empty),
// in the dimensions of o.dims. The layers are one repeat block sized by `layers` at bind, or, when
// o.unrolled_layers > 0, that many layers built one by one.
constexpr tensor vision_tower(graph_builder& g, tensor pixels, const vit_options& o) {
  using detail::joined;
  const vit_names& nm = o.names;
  const weight_layout hf = weight_layout::out_in;
  const extent model = o.dims.model;
  const patch_grid grid{.patch = vit_dims::patch_size, .patches = vit_dims::patches};

  // HF's Conv2d (model, channels, patch, patch) read as the product's (model, features)
  tensor patch_w = g.param(joined(nm.patch_projection, "weight").view(), {model, vit_dims::patch_features});
  tensor patches =
      linear(patchify(pixels, grid, vit_dims::patch_features), patch_w, hf);  // (batch, patches, model)
  if (o.patch_bias) patches = add_bias(patches, g.param(joined(nm.patch_projection, "bias").view(), {model}));
  tensor cls =
      broadcast(g.param(nm.class_token, {dim::fixed<1>, model}), 0, dim::batch);  // (batch, 1, model)
  tensor x = position_embedding(concat({cls, patches}, 1, o.dims.seq),
                                g.param(nm.positions, {o.dims.positions, model}));
  auto norm = [&](tensor in, std::string_view stem) {
    return layer_norm(in, g.param(joined(stem, "weight").view(), {model}),
                      g.param(joined(stem, "bias").view(), {model}), o.layer_norm_eps);
  };
  if (!nm.pre_norm.empty()) x = norm(x, nm.pre_norm);

  if (o.unrolled_layers <= 0) {
    x = repeat(nm.layers, x, [&](graph_builder& b, tensor x) { return detail::vision_layer(b, x, o, ""); });
  } else {
    for (std::int64_t i = 0; i < o.unrolled_layers; ++i) {
      name_buffer layer = detail::numbered(nm.layers, i);  // "<layers>.<i>"
      g.push_scope(layer.view());
      layer.append(".");
      x = detail::vision_layer(g, x, o, layer.view());
      g.pop_scope();
    }
  }
  return nm.final_norm.empty() ? x : norm(x, nm.final_norm);
}

// ViTForImageClassification: inputs pixel_values (batch, channels, image_size, image_size) and
// labels (batch, 1) i64; outputs loss, logits (batch, 1, labels) and last_hidden_state (batch, seq,
// model). The classifier is replicated on the tensor axis (a few labels).
template <class Mesh>
constexpr graph vit(vit_options o = {}) {
  using namespace shardgraph::dim;
  builder<Mesh> g(o.type);
  auto data_input = [&](std::string_view name, shape s, dtype t) {
    if (o.data_axis.empty()) return g.input(name, s, t);
    return g.input(name, s, t, detail::on_axis(o.data_axis, shard<0>));
  };
  tensor pixels = data_input("pixel_values",
                             {batch, vit_dims::channels, vit_dims::image_size, vit_dims::image_size}, o.type);
  tensor labels = data_input("labels", {batch, fixed<1>}, dtype::i64);
  tensor states = vision_tower(g, pixels, o);
  output(states, "last_hidden_state");
  const std::string_view head = o.names.classifier;
  tensor logits =
      linear(slice(states, 1, 0, fixed<1>),  // the class token's state
             g.param(detail::joined(head, "weight").view(), {vit_dims::labels, o.dims.model}),
             g.param(detail::joined(head, "bias").view(), {vit_dims::labels}), weight_layout::out_in);
  output(cross_entropy(logits, labels), "loss");
  output(logits, "logits");
  return g.finish();
}

}  // namespace shardgraph::models
