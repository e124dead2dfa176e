#pragma once
// Weight sources for HF checkpoints: map shardgraph parameter names to HF tensor names and fill
// a rank's slice. GPT-2's fused c_attn (model, 3 * model) is split into q, k, v by columns;
// GPT-2 Conv1D weights are already (in, out) and LLaMA Linear weights stay (out, in), as the
// models declare them. A padded vocabulary (GPT-2's 50257 -> 50304) reads zeros past the file's rows.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/io/safetensors.hpp"
#include "shardgraph/runtime/weights.hpp"

namespace shardgraph::io {

namespace detail {

// Where a shardgraph tensor lives in the file: its name and a shift of its columns (last dim).
struct hf_location {
  std::string name;
  std::int64_t column_shift = 0;
};

// Copies `slice` of a tensor that sits in file tensor `loc` (shifted along its last dimension);
// elements outside the file tensor's extent read as zero (vocabulary padding).
inline void read_slice(const safetensors_file& file, const hf_location& loc, const tensor_slice& slice, host_tensor& out) {
  const tensor_info& info = file.info(loc.name);
  const std::size_t rank = slice.global.size();
  if (info.shape.size() != rank)
    fail(file.name() + ": " + loc.name, "has " + std::to_string(info.shape.size()) + " dimensions, the model expects " +
                                            std::to_string(rank),
         "check that the checkpoint and the config describe the same model");
  for (std::size_t d = 0; d < rank; ++d) {
    std::int64_t needed = slice.global[d] + (d + 1 == rank ? loc.column_shift : 0);
    bool padded_rows = d == 0 && rank == 2 && slice.global[d] > info.shape[d];
    if (needed > info.shape[d] && !padded_rows)
      fail(file.name() + ": " + loc.name,
           "dimension " + std::to_string(d) + " is " + std::to_string(info.shape[d]) + " but the model needs " + std::to_string(needed),
           "check that the checkpoint and the config describe the same model");
  }
  std::vector<double> values = file.read_as<double>(loc.name);
  std::vector<std::int64_t> index(rank, 0);
  for (std::int64_t local = 0; local < slice.numel(); ++local) {
    std::int64_t flat = 0;
    bool inside = true;
    for (std::size_t d = 0; d < rank; ++d) {
      std::int64_t i = slice.offset[d] + index[d] + (d + 1 == rank ? loc.column_shift : 0);
      inside = inside && i < info.shape[d];
      flat = flat * info.shape[d] + i;
    }
    double v = inside ? values[static_cast<std::size_t>(flat)] : 0.0;
    if (out.type() == dtype::f64) out.values<double>()[static_cast<std::size_t>(local)] = v;
    else out.values<float>()[static_cast<std::size_t>(local)] = static_cast<float>(v);
    for (std::size_t d = rank; d-- > 0;) {
      if (++index[d] < slice.count[d]) break;
      index[d] = 0;
    }
  }
}

inline hf_location gpt2_location(std::string_view name, std::int64_t model) {
  std::string n(name);
  for (const char* part : {"q", "k", "v"}) {
    std::string marker = std::string(".attn.") + part + ".";
    if (auto at = n.find(marker); at != std::string::npos) {
      std::int64_t which = part[0] == 'q' ? 0 : part[0] == 'k' ? 1 : 2;
      return {"transformer." + n.substr(0, at) + ".attn.c_attn." + n.substr(at + marker.size()), which * model};
    }
  }
  return {"transformer." + n, 0};
}

}  // namespace detail

// GPT2LMHeadModel tensors ("transformer.h.0.attn.c_attn.weight", ...) for models::gpt2.
inline weight_source hf_gpt2_weights(std::shared_ptr<const safetensors_file> file, std::int64_t model) {
  return [file, model](std::string_view name, const tensor_slice& slice, host_tensor& out) {
    detail::read_slice(*file, detail::gpt2_location(name, model), slice, out);
  };
}

// LlamaForCausalLM tensors ("model.layers.0.self_attn.q_proj.weight", "lm_head.weight") for models::llama.
inline weight_source hf_llama_weights(std::shared_ptr<const safetensors_file> file) {
  return [file](std::string_view name, const tensor_slice& slice, host_tensor& out) {
    std::string hf = name == "lm_head.weight" ? std::string(name) : "model." + std::string(name);
    detail::read_slice(*file, {hf, 0}, slice, out);
  };
}

}  // namespace shardgraph::io
