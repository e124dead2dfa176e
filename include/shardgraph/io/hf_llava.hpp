#pragma once
// HF LLaVA checkpoints (LlavaForConditionalGeneration) for models::llava: config.json's options
// and sizes, and the weight source that reads the tensors under HF's names.
//
//   auto options = sg::io::hf_llava_options(dir + "/config.json", {.type = sg::dtype::f64});
//   sg::models::llava_config config = sg::io::hf_llava_config(dir + "/config.json", options);
//   auto weights = sg::io::hf_llava_weights(sg::io::safetensors_checkpoint::open(dir), options,
//   config.text.vocab);
//
// config.json nests the decoder's LLaMA config (text_config) and the CLIP vision config
// (vision_config), read as hf_llama_config and hf_vit_config read theirs. What models::llava does
// not model is refused by name: a vision_feature_select_strategy other than "default" (the patches
// without the class token), a projector_hidden_act other than "gelu" or "gelu_new", a
// vision_feature_layer that is a list or reads no layer, and an image_seq_length other than the
// image's patches.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/weight_source.hpp"
#include "shardgraph/io/hf_config.hpp"
#include "shardgraph/io/hf_vit.hpp"
#include "shardgraph/io/hf_weights.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/io/safetensors_checkpoint.hpp"
#include "shardgraph/models/llava.hpp"

namespace shardgraph::io {

namespace detail {
inline const json::value& sub_config(const std::string& path, const json::value& c, const char* key) {
  const json::value* sub = c.find(key);
  if (sub == nullptr || sub->type() != json::kind::object)
    fail(path + ": " + key, "is missing or not an object",
         "give a LLaVA config.json as LlavaConfig's save_pretrained writes it (text_config and "
         "vision_config)");
  return *sub;
}

// The tower's layers that vision_feature_layer reads (HF's hidden_states[vision_feature_layer]:
// index 0 the embeddings, -1 the last layer's output), of `layers`.
inline std::int64_t llava_feature_layers(const std::string& path, const json::value& c, std::int64_t layers) {
  const json::value* at = c.find("vision_feature_layer");
  if (at == nullptr || at->type() != json::kind::integer)
    fail(path + ": vision_feature_layer",
         "is missing or not one number (a list concatenates several layers' states)",
         "give one layer, e.g. -2 (models::llava reads one layer's states)");
  const std::int64_t index = at->as_int();
  const std::int64_t used = index < 0 ? layers + 1 + index : index;
  if (used < 1 || used > layers)
    fail(path + ": vision_feature_layer",
         std::to_string(index) + " reads no layer of the tower's " + std::to_string(layers),
         "give an index in [1, num_hidden_layers] or [-num_hidden_layers, -1]");
  return used;
}

inline models::vit_activation llava_projector_activation(const std::string& path, const json::value& c) {
  const std::string act = c.at("projector_hidden_act").as_string();
  if (act == "gelu") return models::vit_activation::gelu_erf;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return models::vit_activation::gelu_tanh;
  fail(path + ": projector_hidden_act", "\"" + act + "\" is not supported",
       "use \"gelu\" (the erf GELU of LLaVA's projector) or \"gelu_new\" (its tanh approximation)");
}

inline void expect_llava(const std::string& path, const json::value& c) {
  expect_model_type(path, c, "llava");
  const json::value* strategy = c.find("vision_feature_select_strategy");
  if (strategy != nullptr && strategy->as_string() != "default")
    fail(path + ": vision_feature_select_strategy", "\"" + strategy->as_string() + "\" is not supported",
         "use \"default\" (the patches' states, the class token dropped)");
}
}  // namespace detail

// The options of models::llava that a LLaVA config.json fixes: the decoder's (hf_llama_options of
// text_config), the tower's eps, activation, q/k/v biases and layers read (vision_feature_layer),
// the projector's activation and biases; the others (dtype, axes) as in `base`.
inline models::llava_options hf_llava_options(const std::string& path, const json::value& c,
                                              models::llava_options base = {}) {
  detail::expect_llava(path, c);
  const json::value& vision = detail::sub_config(path, c, "vision_config");
  base.text = hf_llama_options(path + ": text_config", detail::sub_config(path, c, "text_config"), base.text);
  base.vision = hf_vit_options(path + ": vision_config", vision, base.vision);
  base.vision.unrolled_layers = detail::llava_feature_layers(
      path, c, detail::config_size(path + ": vision_config", vision, "num_hidden_layers"));
  base.projector_activation = detail::llava_projector_activation(path, c);
  base.projector_bias = detail::flag_or(c, "multimodal_projector_bias", true);
  return base;
}
inline models::llava_options hf_llava_options(const std::string& path, models::llava_options base = {}) {
  return hf_llava_options(path, read_json_file(path), base);
}

// Reads a LLaVA config.json: the decoder's sizes as hf_llama_config, the tower's as hf_vit_config
// (model_type "clip_vision_model"), each checked against `compiled`'s options, and the layers the
// features come from, the projector's activation and biases and image_seq_length (the image's
// patches) against `compiled`.
inline models::llava_config hf_llava_config(const std::string& path,
                                            const models::llava_options& compiled = {}) {
  const json::value c = read_json_file(path);
  const models::llava_options in_file = hf_llava_options(path, c);
  const std::string vision_path = path + ": vision_config";
  const json::value& vision = detail::sub_config(path, c, "vision_config");
  detail::expect_model_type(vision_path, vision, "clip_vision_model");
  models::llava_config config{
      .vision = detail::vit_encoder_config(vision_path, vision, compiled.vision),
      .text =
          hf_llama_config(path + ": text_config", detail::sub_config(path, c, "text_config"), compiled.text)};
  if (in_file.vision.unrolled_layers != compiled.vision.unrolled_layers)
    fail(path + ": vision_feature_layer",
         "the checkpoint reads the tower's first " + std::to_string(in_file.vision.unrolled_layers) +
             " layers, but the program was compiled with vision.unrolled_layers = " +
             std::to_string(compiled.vision.unrolled_layers),
         "compile the model with the options hf_llava_options reads");
  if (in_file.projector_activation != compiled.projector_activation)
    fail(path + ": projector_hidden_act",
         "the checkpoint says \"" + detail::activation_name(in_file.projector_activation) +
             "\" but the program was compiled with \"" +
             detail::activation_name(compiled.projector_activation) + "\"",
         "compile the model with llava_options::projector_activation as the checkpoint's (hf_llava_options "
         "reads it)");
  detail::expect_flag(path, "multimodal_projector_bias", in_file.projector_bias, compiled.projector_bias);
  const std::int64_t image_tokens = detail::config_size(path, c, "image_seq_length");
  if (image_tokens != config.image_tokens())
    fail(path + ": image_seq_length",
         std::to_string(image_tokens) + " is not the image's " + std::to_string(config.image_tokens()) +
             " patches",
         "give image_seq_length = (image_size / patch_size)^2: models::llava puts one feature a patch");
  return config;
}

// The checkpoint's name of models::llava's parameter `name` (a block weight's with its layer, as
// weight sources see it): the tower's below "model.vision_tower.", the projector's below "model.",
// the decoder's below "model.language_model.", lm_head.weight as it is.
inline std::string hf_llava_tensor_name(std::string_view name, const models::llava_options& o) {
  const models::vit_names& n = o.vision.names;
  for (std::string_view tower :
       {n.class_token, n.positions, n.patch_projection, n.pre_norm, n.layers, n.final_norm}) {
    const std::string_view module =
        tower.substr(0, tower.find('.'));  // CLIP's: embeddings, pre_layrnorm, encoder
    if (!module.empty() && name.starts_with(module) && name.size() > module.size() &&
        name[module.size()] == '.')
      return "model.vision_tower." + std::string(name);
  }
  if (name.starts_with("lm_head.")) return std::string(name);
  if (name.starts_with("multi_modal_projector.")) return "model." + std::string(name);
  return "model.language_model." + std::string(name);
}

// A weight source for models::llava compiled with `o`, HF's names (hf_llava_tensor_name). The
// tower's class token, positions and patch projection are read in the model's shape, as
// hf_vit_weights reads them. `vocab`: text_config's vocab_size when the model pads its vocabulary
// (embed_tokens and lm_head then have `vocab` rows in the files, and the padding reads as zeros);
// 0: the model's rows. Each call reads only its slice; `bytes_read` (optional) adds up the bytes.
inline weight_source hf_llava_weights(std::shared_ptr<const safetensors_checkpoint> checkpoint,
                                      const models::llava_options& o, std::int64_t vocab = 0,
                                      std::shared_ptr<std::atomic<std::uint64_t>> bytes_read = nullptr) {
  const std::string tower_prefix = "model.vision_tower.";
  weight_source tower = hf_vit_weights(checkpoint, o.vision.names, tower_prefix, bytes_read);
  return [checkpoint, o, tower, tower_prefix, vocab, bytes_read](
             std::string_view name, const tensor_slice& slice, host_tensor& out) {
    const std::string hf = hf_llava_tensor_name(name, o);
    if (hf.starts_with(tower_prefix)) return tower(name, slice, out);
    std::vector<std::int64_t> file_shape = slice.global;
    const bool table = name == "embed_tokens.weight" || name == "lm_head.weight";
    if (table && vocab > 0 && !file_shape.empty()) file_shape[0] = vocab;
    detail::read_slice(checkpoint->file_of(hf), {hf, 0}, file_shape, slice, out, bytes_read.get());
  };
}

}  // namespace shardgraph::io
