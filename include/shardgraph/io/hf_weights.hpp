#pragma once
// Weight sources for HF checkpoints: map shardgraph parameter names to HF tensor names and fill
// a rank's slice. GPT-2's fused c_attn (model, 3 * model) is split into q, k, v by columns;
// GPT-2 Conv1D weights are already (in, out) and LLaMA Linear weights stay (out, in), as the
// models declare them. Every tensor read must have a float dtype and exactly the shape the model
// implies; a vocabulary table the model pads (GPT-2's 50257 -> 50304) must hold exactly config.json's
// vocab_size rows, and the rows past them read as zeros.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/core/weight_source.hpp"
#include "shardgraph/io/hf_expected_tensors.hpp"
#include "shardgraph/io/safetensors.hpp"
#include "shardgraph/io/safetensors_checkpoint.hpp"

namespace shardgraph::io {

namespace detail {

// Where a shardgraph tensor lives in the file: its name and a shift of its columns (last dim).
// `reshaped`: the file may store it in another shape of the same elements, in the same row-major
// order (HF's (1, 1, hidden) class token for a (1, hidden) parameter); it is read in the model's.
struct hf_location {
  std::string name;
  std::int64_t column_shift = 0;
  bool reshaped = false;
};

// The file's description of `loc`, its shape replaced by `file_shape` where loc is reshaped and
// both hold as many elements.
inline tensor_info stored_as(const safetensors_file& file, const hf_location& loc,
                             const std::vector<std::int64_t>& file_shape) {
  tensor_info info = file.info(loc.name);
  std::uint64_t elements = 1;
  for (std::int64_t d : file_shape) elements *= static_cast<std::uint64_t>(d);
  if (loc.reshaped && info.element_count() == elements) info.shape = file_shape;
  return info;
}

// Whether the file's elements of dtype `from` are stored exactly as a host_tensor of `to` holds them
// (the same format, and this machine little-endian as safetensors is): a run is then copied as bytes.
inline bool stored_alike(st_dtype from, dtype to) {
  if constexpr (std::endian::native != std::endian::little) return false;
  return (from == st_dtype::bf16 && to == dtype::bf16) || (from == st_dtype::f16 && to == dtype::f16) ||
         (from == st_dtype::f32 && to == dtype::f32) || (from == st_dtype::f64 && to == dtype::f64);
}

// Copies `slice` of a tensor that sits in file tensor `loc` (shifted along its last dimension).
// The file tensor must be a float of exactly `file_shape`; rows past file_shape[0] (a padded
// vocabulary) read as zero. Only the slice's bytes are read, one run of its last dimension at a
// time; `bytes_read` (nullable) counts them.
inline void read_slice(const safetensors_file& file, const hf_location& loc,
                       const std::vector<std::int64_t>& file_shape, const tensor_slice& slice,
                       host_tensor& out, std::atomic<std::uint64_t>* bytes_read) {
  const tensor_info info = stored_as(file, loc, file_shape);
  const std::size_t rank = slice.global.size();
  if (!is_float_dtype(info.dtype) || info.shape != file_shape)
    fail(file.name() + ": tensor '" + loc.name + "'",
         tensor_mismatch(file_shape, "the model's parameter", found_string(info.dtype, info.shape)),
         "check that the checkpoint and the config describe the same model");
  for (std::size_t d = 0; d < rank; ++d) {
    const std::int64_t needed = slice.global[d] + (d + 1 == rank ? loc.column_shift : 0);
    const bool padded_rows = d == 0 && rank == 2 && loc.column_shift == 0;
    if (rank != file_shape.size() || (needed > file_shape[d] && !padded_rows) ||
        (needed < file_shape[d] && d + 1 < rank))
      fail(file.name() + ": tensor '" + loc.name + "'",
           "the parameter's shape " + shape_string(slice.global) + " does not fit in " +
               shape_string(file_shape),
           "this is a bug in the weight source; please report it");
  }
  // The slice as runs of its last dimension: `rows` of them, `width` elements each.
  const std::int64_t width = rank == 0 ? 1 : slice.count[rank - 1];
  const std::int64_t rows = width == 0 ? 0 : slice.numel() / width;
  const std::int64_t file_width = rank == 0 ? 1 : info.shape[rank - 1];
  const std::int64_t first_column = rank == 0 ? 0 : slice.offset[rank - 1] + loc.column_shift;
  std::vector<std::int64_t> index(rank > 0 ? rank - 1 : 0, 0);  // the run's position in the leading dims
  std::uint64_t bytes = 0;
  // The model's dtype as the file stores it (a bf16 model from a bf16 checkpoint): runs are copied
  // from the mapping as they are, not converted element by element.
  const bool as_stored = stored_alike(info.dtype, out.type());
  const std::span<const std::byte> stored = as_stored ? file.bytes(loc.name) : std::span<const std::byte>{};
  const std::size_t element = dtype_size(out.type());
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t file_row = 0;  // flat index of the run's row among the file tensor's leading dims
    bool inside = true;
    for (std::size_t d = 0; d + 1 < rank; ++d) {
      const std::int64_t i = slice.offset[d] + index[d];
      inside = inside && i < info.shape[d];
      file_row = file_row * info.shape[d] + i;
    }
    const auto at = static_cast<std::size_t>(r * width);
    const auto n = static_cast<std::size_t>(width);
    const auto first = static_cast<std::uint64_t>(file_row * file_width + first_column);
    if (as_stored) {
      std::byte* to = out.bytes().data() + at * element;
      if (inside && (first + n) * element > stored.size())
        fail(file.name() + ": " + loc.name,
             "elements [" + std::to_string(first) + ", " + std::to_string(first + n) + ") lie past its " +
                 std::to_string(stored.size() / element),
             "this is a bug in the weight source; please report it");
      if (inside)
        std::memcpy(to, stored.data() + first * element, n * element);
      else
        std::memset(to, 0, n * element);  // padding rows past the file's
    } else if (out.type() == dtype::f64 || out.type() == dtype::f32) {
      if (!inside && out.type() == dtype::f64)  // padding rows past the file's
        std::fill_n(out.values<double>().begin() + static_cast<std::ptrdiff_t>(at), n, 0.0);
      else if (!inside)
        std::fill_n(out.values<float>().begin() + static_cast<std::ptrdiff_t>(at), n, 0.0f);
      else if (out.type() == dtype::f64)
        file.read_elements_as<double>(loc.name, first, n, out.values<double>().data() + at);
      else
        file.read_elements_as<float>(loc.name, first, n, out.values<float>().data() + at);
    } else {  // 16-bit: read in f32, rounded once to the model's dtype
      std::vector<float> values(n, 0.0f);
      if (inside) file.read_elements_as<float>(loc.name, first, n, values.data());
      for (std::size_t j = 0; j < n; ++j) out.set(static_cast<std::int64_t>(at + j), values[j]);
    }
    if (inside) bytes += n * st_dtype_size(info.dtype);
    for (std::size_t d = index.size(); d-- > 0;) {
      if (++index[d] < slice.count[d]) break;
      index[d] = 0;
    }
  }
  if (bytes_read != nullptr) *bytes_read += bytes;
}

// `prefix`: "transformer." as GPT2LMHeadModel saves, or "" as the GPT2Model files of the hub's gpt2.
// An untied head (tie_word_embeddings false) is "lm_head.weight", outside the transformer.
inline hf_location gpt2_location(std::string_view name, std::int64_t model, const std::string& prefix) {
  std::string n(name);
  if (n == "lm_head.weight") return {n, 0};
  for (const char* part : {"q", "k", "v"}) {
    std::string marker = std::string(".attn.") + part + ".";
    if (auto at = n.find(marker); at != std::string::npos) {
      std::int64_t which = part[0] == 'q' ? 0 : part[0] == 'k' ? 1 : 2;
      return {prefix + n.substr(0, at) + ".attn.c_attn." + n.substr(at + marker.size()), which * model};
    }
  }
  return {prefix + n, 0};
}

// The shape of the file tensor that GPT-2 parameter `name` (of shape `global`) is read from: the
// same, but c_attn three q/k/v blocks wide, and wte (and an untied lm_head) `vocab` rows when
// vocab > 0 (config.json's vocab_size, which the model pads past).
inline std::vector<std::int64_t> gpt2_file_shape(std::string_view name, std::vector<std::int64_t> global,
                                                 std::int64_t model, std::int64_t vocab) {
  const bool qkv = name.find(".attn.q.") != std::string_view::npos ||
                   name.find(".attn.k.") != std::string_view::npos ||
                   name.find(".attn.v.") != std::string_view::npos;
  if (qkv && !global.empty()) global.back() = size_product(3, model, "3 * n_embd");
  const bool table = name == "wte.weight" || name == "lm_head.weight";
  if (table && vocab > 0 && !global.empty()) global[0] = vocab;
  return global;
}

// models::llama's names are LlamaForCausalLM's without "model.", the head's aside.
inline std::string llama_location(std::string_view name) {
  return name == "lm_head.weight" ? std::string(name) : "model." + std::string(name);
}

}  // namespace detail

// The prefix of a GPT-2 checkpoint's names: "transformer." as GPT2LMHeadModel saves, or "" as
// GPT2Model's files (the hub's gpt2).
inline std::string hf_gpt2_prefix(const safetensors_checkpoint& checkpoint) {
  return checkpoint.contains("wte.weight") && !checkpoint.contains("transformer.wte.weight") ? ""
                                                                                             : "transformer.";
}

// Whether a LLaMA checkpoint ties its head to the embedding: no lm_head.weight (as Llama 3.2 1B).
inline bool hf_llama_tied(const safetensors_checkpoint& checkpoint) {
  return !checkpoint.contains("lm_head.weight") && checkpoint.contains("model.embed_tokens.weight");
}

// GPT2LMHeadModel tensors ("transformer.h.0.attn.c_attn.weight", ...) for models::gpt2, from one
// file or a checkpoint directory (safetensors_checkpoint: several files and their index). Names
// without the "transformer." prefix (GPT2Model's, as in the hub's gpt2) are read as well. Each call
// reads only its slice; `bytes_read` (optional) adds up the tensor bytes this source has read.
// `vocab`: config.json's vocab_size when the model pads its vocabulary past it (wte must then have
// exactly `vocab` rows, and the padding reads as zeros); 0: wte has the model's rows.
inline weight_source hf_gpt2_weights(std::shared_ptr<const safetensors_checkpoint> checkpoint,
                                     std::int64_t model,
                                     std::shared_ptr<std::atomic<std::uint64_t>> bytes_read = nullptr,
                                     std::int64_t vocab = 0) {
  const std::string prefix = hf_gpt2_prefix(*checkpoint);
  return [checkpoint, model, bytes_read, prefix, vocab](std::string_view name, const tensor_slice& slice,
                                                        host_tensor& out) {
    const detail::hf_location loc = detail::gpt2_location(name, model, prefix);
    detail::read_slice(checkpoint->file_of(loc.name), loc,
                       detail::gpt2_file_shape(name, slice.global, model, vocab), slice, out,
                       bytes_read.get());
  };
}
inline weight_source hf_gpt2_weights(const std::shared_ptr<const safetensors_file>& file, std::int64_t model,
                                     std::shared_ptr<std::atomic<std::uint64_t>> bytes_read = nullptr,
                                     std::int64_t vocab = 0) {
  return hf_gpt2_weights(safetensors_checkpoint::of(file), model, std::move(bytes_read), vocab);
}

// LlamaForCausalLM tensors ("model.layers.0.self_attn.q_proj.weight", "lm_head.weight") for models::llama.
// A model compiled with tie_word_embeddings (as Llama 3.2 1B) asks for no lm_head.weight: its head
// is embed_tokens. A checkpoint without lm_head.weight for an untied model is refused by name.
// `vocab` as for hf_gpt2_weights: the rows of embed_tokens and lm_head in the file.
inline weight_source hf_llama_weights(std::shared_ptr<const safetensors_checkpoint> checkpoint,
                                      std::shared_ptr<std::atomic<std::uint64_t>> bytes_read = nullptr,
                                      std::int64_t vocab = 0) {
  return [checkpoint, bytes_read, vocab](std::string_view name, const tensor_slice& slice, host_tensor& out) {
    const std::string hf = detail::llama_location(name);
    if (hf == "lm_head.weight" && !checkpoint->contains(hf) &&
        checkpoint->contains("model.embed_tokens.weight"))
      fail("hf_llama_weights: lm_head.weight",
           "is missing, and the model was compiled with an untied head (tie_word_embeddings false)",
           "set \"tie_word_embeddings\": true in config.json if the head is the embedding (then compile with "
           "llama_options::tie_word_embeddings = true, as open_hf_model does), or give the checkpoint's "
           "lm_head.weight");
    std::vector<std::int64_t> file_shape = slice.global;
    const bool table = name == "embed_tokens.weight" || name == "lm_head.weight";
    if (table && vocab > 0 && !file_shape.empty()) file_shape[0] = vocab;
    detail::read_slice(checkpoint->file_of(hf), {hf, 0}, file_shape, slice, out, bytes_read.get());
  };
}
inline weight_source hf_llama_weights(const std::shared_ptr<const safetensors_file>& file,
                                      std::shared_ptr<std::atomic<std::uint64_t>> bytes_read = nullptr,
                                      std::int64_t vocab = 0) {
  return hf_llama_weights(safetensors_checkpoint::of(file), std::move(bytes_read), vocab);
}

}  // namespace shardgraph::io
