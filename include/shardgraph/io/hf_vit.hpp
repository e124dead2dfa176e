#pragma once
// HF vision transformer checkpoints for models::vit: config.json's sizes and options, the tensors
// they imply, and the weight source that reads them (one file or a sharded checkpoint).
//
//   auto options = sg::io::hf_vit_options(dir + "/config.json", {.type = sg::dtype::f64});
//   sg::models::vit_config config = sg::io::hf_vit_config(dir + "/config.json", options);
//   auto weights = sg::io::hf_vit_weights(sg::io::safetensors_checkpoint::open(dir), options.names);
//
// HF stores three tensors in another shape than the model declares, with the same elements in
// the same (row-major) order, and they are read as the model's shape: the class token (1, 1,
// hidden) as (1, hidden), the position embeddings (1, positions, hidden) as (positions, hidden)
// and the patch projection, a convolution (hidden, channels, patch, patch), as the product's
// (hidden, channels * patch * patch).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/weight_source.hpp"
#include "shardgraph/io/hf_config.hpp"
#include "shardgraph/io/hf_config_sizes.hpp"
#include "shardgraph/io/hf_expected_tensors.hpp"
#include "shardgraph/io/hf_weights.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/io/safetensors_checkpoint.hpp"
#include "shardgraph/models/vit.hpp"

namespace shardgraph::io {

namespace detail {
inline models::vit_activation vit_activation_of(const std::string& path, const json::value& c) {
  const std::string act = c.at("hidden_act").as_string();
  if (act == "gelu") return models::vit_activation::gelu_erf;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return models::vit_activation::gelu_tanh;
  if (act == "quick_gelu") return models::vit_activation::quick_gelu;
  fail(path + ": hidden_act", "\"" + act + "\" is not supported",
       "use \"gelu\" (the erf GELU of ViT), \"gelu_new\" (its tanh approximation) or \"quick_gelu\" "
       "(CLIP's)");
}
inline std::string activation_name(models::vit_activation a) {
  switch (a) {
    case models::vit_activation::gelu_erf: return "gelu";
    case models::vit_activation::gelu_tanh: return "gelu_new";
    case models::vit_activation::quick_gelu: return "quick_gelu";
  }
  return "?";
}
// HF's num_labels: the entries of id2label (config.json keeps no num_labels of its own).
inline std::int64_t vit_labels(const std::string& path, const json::value& c) {
  if (c.find("num_labels") != nullptr) return config_size(path, c, "num_labels");
  const json::value* labels = c.find("id2label");
  if (labels == nullptr || labels->as_object().empty())
    fail(path + ": id2label", "is missing or empty, so the classifier has no labels",
         "give id2label (one entry a label), as ViTForImageClassification's save_pretrained writes it");
  return static_cast<std::int64_t>(labels->as_object().size());
}
}  // namespace detail

// The options of models::vit that a ViT config.json fixes (eps, activation, q/k/v biases); the
// others (dtype, names, axes) as in `base`.
inline models::vit_options hf_vit_options(const std::string& path, const json::value& c,
                                          models::vit_options base = {}) {
  base.layer_norm_eps = c.at("layer_norm_eps").as_double();
  base.activation = detail::vit_activation_of(path, c);
  base.qkv_bias = detail::flag_or(c, "qkv_bias", true);
  return base;
}
inline models::vit_options hf_vit_options(const std::string& path, models::vit_options base = {}) {
  return hf_vit_options(path, read_json_file(path), base);
}

namespace detail {
// The encoder's sizes in a ViT or CLIP vision config `c` (labels 0), checked as hf_vit_config says.
inline models::vit_config vit_encoder_config(const std::string& path, const json::value& c,
                                             const models::vit_options& compiled) {
  const std::int64_t model = config_size(path, c, "hidden_size"),
                     heads = config_size(path, c, "num_attention_heads");
  const std::int64_t image = config_size(path, c, "image_size"), patch = config_size(path, c, "patch_size");
  expect_divides(path, "num_attention_heads", heads, "hidden_size", model);
  expect_divides(path, "patch_size", patch, "image_size", image);
  const models::vit_options in_file = hf_vit_options(path, c);
  expect_value(path, "layer_norm_eps", in_file.layer_norm_eps, compiled.layer_norm_eps);
  if (in_file.activation != compiled.activation)
    fail(path + ": hidden_act",
         "the checkpoint says \"" + activation_name(in_file.activation) +
             "\" but the program was compiled with \"" + activation_name(compiled.activation) + "\"",
         "compile the model with vit_options::activation as the checkpoint's (hf_vit_options reads it)");
  expect_flag(path, "qkv_bias", in_file.qkv_bias, compiled.qkv_bias);
  return {.image_size = image,
          .patch_size = patch,
          .channels = config_size(path, c, "num_channels"),
          .model = model,
          .heads = heads,
          .layers = config_size(path, c, "num_hidden_layers"),
          .ffn = config_size(path, c, "intermediate_size"),
          .labels = 0};
}
}  // namespace detail

// Reads a ViT config.json (ViTForImageClassification's): checks the sizes (positive; heads dividing
// hidden_size, patch_size dividing image_size) and eps, activation and q/k/v biases against
// `compiled`, and returns the sizes.
inline models::vit_config hf_vit_config(const std::string& path, const models::vit_options& compiled = {}) {
  const json::value c = read_json_file(path);
  detail::expect_model_type(path, c, "vit");
  models::vit_config config = detail::vit_encoder_config(path, c, compiled);
  config.labels = detail::vit_labels(path, c);
  return config;
}

// The checkpoint's tensors for models::vit of sizes `c` with options `o`, HF's names and shapes:
// "<prefix><module>" for the encoder ("vit." in ViTForImageClassification), the classifier
// outside the prefix.
inline std::vector<hf_tensor_spec> hf_vit_tensors(const models::vit_config& c, const models::vit_options& o,
                                                  const std::string& prefix = "vit.") {
  const models::vit_names& n = o.names;
  const std::int64_t d = c.model, tokens = c.patches() + 1;
  auto module = [](std::string_view stem, const char* part) { return std::string(stem) + "." + part; };
  std::vector<hf_tensor_spec> t{
      {prefix + std::string(n.class_token), {1, 1, d}},
      {prefix + std::string(n.positions), {1, tokens, d}},
      {prefix + module(n.patch_projection, "weight"), {d, c.channels, c.patch_size, c.patch_size}}};
  if (o.patch_bias) t.push_back({prefix + module(n.patch_projection, "bias"), {d}});
  auto norm = [&](const std::string& stem) {
    t.insert(t.end(), {{stem + ".weight", {d}}, {stem + ".bias", {d}}});
  };
  auto linear = [&](const std::string& stem, std::int64_t out, std::int64_t in, bool bias) {
    t.push_back({stem + ".weight", {out, in}});
    if (bias) t.push_back({stem + ".bias", {out}});
  };
  if (!n.pre_norm.empty()) norm(prefix + std::string(n.pre_norm));
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = prefix + std::string(n.layers) + "." + std::to_string(l) + ".";
    norm(p + std::string(n.norm_before));
    for (std::string_view qkv : {n.q, n.k, n.v}) linear(p + std::string(qkv), d, d, o.qkv_bias);
    linear(p + std::string(n.o), d, d, true);
    norm(p + std::string(n.norm_after));
    linear(p + std::string(n.fc1), c.ffn, d, true);
    linear(p + std::string(n.fc2), d, c.ffn, true);
  }
  if (!n.final_norm.empty()) norm(prefix + std::string(n.final_norm));
  if (!n.classifier.empty()) linear(std::string(n.classifier), c.labels, d, true);
  return t;
}

// A weight source for models::vit compiled with `names`: parameter "<name>" is the checkpoint's
// "<prefix><name>", the classifier's "<classifier>.*" without the prefix. The class token, the
// positions and the patch projection's weight are read in the model's shape (above); every other
// tensor must have exactly its parameter's. Each call reads only its slice; `bytes_read`
// (optional) adds up the bytes read.
inline weight_source hf_vit_weights(std::shared_ptr<const safetensors_checkpoint> checkpoint,
                                    const models::vit_names& names = {}, const std::string& prefix = "vit.",
                                    std::shared_ptr<std::atomic<std::uint64_t>> bytes_read = nullptr) {
  const std::string head = names.classifier.empty() ? "" : std::string(names.classifier) + ".";
  const std::vector<std::string> reshaped{std::string(names.class_token), std::string(names.positions),
                                          std::string(names.patch_projection) + ".weight"};
  return [checkpoint, head, prefix, reshaped, bytes_read](std::string_view name, const tensor_slice& slice,
                                                          host_tensor& out) {
    const bool classifier = !head.empty() && name.starts_with(head);
    detail::hf_location at{(classifier ? "" : prefix) + std::string(name), 0};
    at.reshaped = std::find(reshaped.begin(), reshaped.end(), name) != reshaped.end();
    detail::read_slice(checkpoint->file_of(at.name), at, slice.global, slice, out, bytes_read.get());
  };
}

}  // namespace shardgraph::io
