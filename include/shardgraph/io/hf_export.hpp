#pragma once
// A shardgraph checkpoint (save_weights, any layout) written back as a HF checkpoint directory that
// transformers' from_pretrained and open_hf_model read: whole tensors under HF's names, GPT-2's q, k
// and v joined into c_attn, a padded vocabulary cut back to the config's, config.json beside them.
// The tensors must be those the config implies (check_hf_tensors, as open_hf_model checks them):
// a checkpoint of more or fewer layers, or of other sizes, than the config is refused.
//
//   sg::io::export_hf("ckpt/step-1000", "hf-out", {.config = "gpt2-dir/config.json"});
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/hf_checkpoint_writer.hpp"
#include "shardgraph/io/hf_config.hpp"
#include "shardgraph/io/hf_expected_tensors.hpp"
#include "shardgraph/io/hf_model.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/io/sharded_weights.hpp"

namespace shardgraph::io {

struct hf_export_options {
  std::string config;  // the model's HF config.json; empty: <checkpoint>/config.json
  std::optional<st_dtype> dtype = std::nullopt;     // F32, BF16, F16 or F64; default: as saved
  std::uint64_t max_file_bytes = 5'000'000'000ull;  // save_pretrained's default max_shard_size, 5 GB
};

namespace detail {

// Where a shardgraph tensor goes in a HF tensor: at `column` of its last dimension (GPT-2's c_attn).
struct hf_part {
  std::string source;
  std::int64_t column = 0;
};

struct hf_export_tensor {
  hf_tensor_plan plan;
  std::vector<hf_part> parts;
};

inline dtype dtype_of_st(st_dtype t, const std::string& where) {
  switch (t) {
    case st_dtype::f64:
      return dtype::f64;
    case st_dtype::f32:
      return dtype::f32;
    case st_dtype::bf16:
      return dtype::bf16;
    case st_dtype::f16:
      return dtype::f16;
    default:
      fail(where, "dtype " + std::string(st_dtype_name(t)) + " is not a weight dtype",
           "give F64, F32, BF16 or F16");
  }
}

// The HF tensors of the checkpoint, in shardgraph's name order, and which saved tensors fill them.
inline std::vector<hf_export_tensor> hf_export_plan(const sharded_weights_index& index,
                                                    const std::string& checkpoint, const std::string& family,
                                                    std::int64_t vocab, std::optional<st_dtype> dtype) {
  std::vector<hf_export_tensor> out;
  for (const std::string& name : index.tensor_names()) {
    if (name.find('#') != std::string::npos) continue;  // optimizer state: m, v, master weights
    const saved_piece& piece = index.pieces(name).front();
    const st_dtype saved = index.file(piece.file).info(name).dtype;
    hf_export_tensor t{{"", dtype.value_or(saved), piece.global}, {{name, 0}}};
    const bool embedding = name == "wte.weight" || name == "embed_tokens.weight" || name == "lm_head.weight";
    if (embedding) {
      if (piece.global.at(0) < vocab)
        fail(checkpoint + ": tensor '" + name + "'",
             "has " + std::to_string(piece.global[0]) + " rows, fewer than the config's vocab_size " +
                 std::to_string(vocab),
             "give the config.json of the model that was saved");
      t.plan.shape[0] = vocab;  // the padded rows past the vocabulary are dropped
    }
    if (family == "gpt2") {
      const std::size_t qkv = name.find(".attn.q.");
      if (name.find(".attn.k.") != std::string::npos || name.find(".attn.v.") != std::string::npos) continue;
      if (qkv != std::string::npos) {  // q, k, v -> c_attn, side by side in the last dimension
        const std::string before = name.substr(0, qkv), after = name.substr(qkv + 8);
        const std::int64_t width = piece.global.back();
        t.parts = {{name, 0}, {before + ".attn.k." + after, width}, {before + ".attn.v." + after, 2 * width}};
        t.plan.shape.back() = 3 * width;
        t.plan.name = "transformer." + before + ".attn.c_attn." + after;
      } else {
        t.plan.name = name == "lm_head.weight" ? name : "transformer." + name;  // an untied head
      }
    } else {
      t.plan.name = name == "lm_head.weight" ? name : "model." + name;
    }
    out.push_back(std::move(t));
  }
  if (out.empty())
    fail(checkpoint, "holds no weights",
         "give a checkpoint that save_weights or save_training_checkpoint wrote");
  return out;
}

}  // namespace detail

// Writes the HF checkpoint of `checkpoint` as the directory `directory` (write_hf_checkpoint: replaced
// as a whole when complete). Returns the tensor bytes written.
inline std::uint64_t export_hf(const std::string& checkpoint, const std::string& directory,
                               const hf_export_options& o = {},
                               const std::function<void(const std::string&)>& log = {}) {
  namespace fs = std::filesystem;
  const std::string config_path =
      o.config.empty() ? (fs::path(checkpoint) / "config.json").string() : o.config;
  if (!fs::is_regular_file(config_path))
    fail("export_hf: " + checkpoint, "there is no " + config_path + " to describe the model",
         "give the HF config.json of the model (the converter's --config)");
  const json::value config = read_json_file(config_path);
  const json::value* type = config.find("model_type");
  const std::string family = type && type->type() == json::kind::string ? type->as_string() : "";
  if (family != "gpt2" && family != "llama")
    fail(config_path, "model_type is not \"gpt2\" or \"llama\"",
         "give the config.json of a GPT-2 or LLaMA model");
  if (o.dtype && *o.dtype != st_dtype::f64 && *o.dtype != st_dtype::f32 && *o.dtype != st_dtype::bf16 &&
      *o.dtype != st_dtype::f16)
    fail("export_hf", "dtype " + std::string(st_dtype_name(*o.dtype)) + " is not a weight dtype",
         "give F64, F32, BF16 or F16");
  const sharded_weights_index index(checkpoint);
  const weight_source source = sharded_weights(checkpoint);
  const std::vector<detail::hf_export_tensor> tensors =
      detail::hf_export_plan(index, checkpoint, family, config.at("vocab_size").as_int(), o.dtype);
  // What the loader would refuse in the result is refused here, before anything is written.
  std::vector<hf_found_tensor> found;
  for (const detail::hf_export_tensor& t : tensors)
    found.push_back({t.plan.name, checkpoint, t.plan.dtype, t.plan.shape});
  check_hf_tensors(found, hf_config_tensors(config_path, found.size()), checkpoint, config_path, false);
  std::vector<hf_tensor_plan> plan;
  std::map<std::string, const detail::hf_export_tensor*> by_name;
  for (const detail::hf_export_tensor& t : tensors) plan.push_back(t.plan), by_name.emplace(t.plan.name, &t);

  const auto make = [&](const hf_tensor_plan& p, std::span<std::byte> out) {
    const detail::hf_export_tensor& t = *by_name.at(p.name);
    const std::size_t element = st_dtype_size(p.dtype);
    const std::int64_t out_width = p.shape.empty() ? 1 : p.shape.back();
    for (const detail::hf_part& part : t.parts) {
      // the whole saved tensor, rows cut to the plan's (the vocabulary), in the output dtype
      tensor_slice slice{index.pieces(part.source).front().global, {}, {}};
      slice.offset.assign(slice.global.size(), 0);
      slice.count = slice.global;
      if (t.parts.size() == 1 && !slice.count.empty()) slice.count[0] = p.shape[0];
      host_tensor values(detail::dtype_of_st(p.dtype, p.name), slice.count);
      source(part.source, slice, values);
      const std::int64_t width = slice.count.empty() ? 1 : slice.count.back();
      const std::int64_t rows = width == 0 ? 0 : values.numel() / width;
      for (std::int64_t r = 0; r < rows; ++r)
        std::memcpy(out.data() + (r * out_width + part.column) * element,
                    values.bytes().data() + r * width * element, static_cast<std::size_t>(width) * element);
    }
  };
  const file_contents config_text = file_contents::open(config_path);
  return write_hf_checkpoint(
      directory,
      std::string(reinterpret_cast<const char*>(config_text.bytes().data()), config_text.bytes().size()),
      plan, o.max_file_bytes, make, log);
}

}  // namespace shardgraph::io
