#pragma once
// Writes a HF checkpoint directory's tensors as save_pretrained does: one model.safetensors, or
// model-0000k-of-0000n.safetensors files of at most max_file_bytes each and
// model.safetensors.index.json naming the file of every tensor. Each file carries {"format": "pt"},
// which from_pretrained requires, and each tensor's CRC-32C (write_safetensors). Tensors are made one
// file at a time, so memory holds one file.
// write_hf_checkpoint writes a whole HF directory, its config.json last, as a new directory swapped in
// when complete (directory_replacement.hpp): an existing checkpoint there stays intact until then.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/atomic_file_writer.hpp"
#include "shardgraph/io/directory_replacement.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/io/safetensors.hpp"

namespace shardgraph::io {

// One tensor to write: its name, dtype and shape; its bytes come from the writer's `make`.
struct hf_tensor_plan {
  std::string name;
  st_dtype dtype = st_dtype::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes() const {
    std::uint64_t n = st_dtype_size(dtype);
    for (const std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
  }
};

namespace detail {
inline bool hf_checkpoint_owns(std::string_view name) {  // the files write_hf_checkpoint writes
  const bool weights = name.starts_with("model") && name.ends_with(".safetensors");
  return weights || name == "model.safetensors.index.json" || name == "config.json" ||
         name.find(".tmp.") != std::string_view::npos;
}
inline constexpr directory_kind hf_checkpoint_directory{"HF checkpoint", "config.json", hf_checkpoint_owns};

inline std::string hf_file_name(std::size_t k, std::size_t files) {  // model-00001-of-00003.safetensors
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, files);
  return name;
}
}  // namespace detail

// Writes `tensors` into `directory`, in order, grouped into files of at most `max_file_bytes`
// (0: one model.safetensors; a tensor larger than the limit gets a file of its own). `make` fills a
// tensor's bytes; `log` (optional) hears of each file written. Every file is atomic and the index
// is written after the files. Returns the tensor bytes written.
inline std::uint64_t write_hf_safetensors(
    const std::string& directory, const std::vector<hf_tensor_plan>& tensors, std::uint64_t max_file_bytes,
    const std::function<void(const hf_tensor_plan&, std::span<std::byte>)>& make,
    const std::function<void(const std::string&)>& log = {}) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec)
    fail(directory, "cannot create the directory: " + ec.message(), "check the path and its permissions");
  std::vector<std::vector<std::size_t>> files(1);  // tensor indices of each file, in order
  std::uint64_t in_file = 0, total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::uint64_t b = tensors[i].bytes();
    if (max_file_bytes > 0 && in_file > 0 && in_file + b > max_file_bytes) files.emplace_back(), in_file = 0;
    files.back().push_back(i);
    in_file += b, total += b;
  }
  std::string weight_map;
  for (std::size_t k = 0; k < files.size(); ++k) {
    const std::string name = files.size() == 1 ? "model.safetensors" : detail::hf_file_name(k, files.size());
    std::vector<std::vector<std::byte>> data;
    std::vector<tensor_to_write> to_write;
    std::uint64_t bytes = 0;
    for (const std::size_t i : files[k]) {
      const hf_tensor_plan& t = tensors[i];
      data.emplace_back(t.bytes());
      make(t, data.back());
      to_write.push_back({t.name, t.dtype, t.shape, data.back()});
      weight_map += (weight_map.empty() ? "" : ",\n    ") + json::quote(t.name) + ": " + json::quote(name);
      bytes += t.bytes();
    }
    write_safetensors((fs::path(directory) / name).string(), to_write, {{"format", "pt"}});
    if (log) {
      char line[160];
      std::snprintf(line, sizeof line, "wrote %s (%zu tensors, %.2f %s)", name.c_str(), to_write.size(),
                    bytes >= 1e9 ? bytes / 1e9 : bytes / 1e6, bytes >= 1e9 ? "GB" : "MB");
      log(line);
    }
  }
  if (files.size() > 1) {
    atomic_file_writer index((fs::path(directory) / "model.safetensors.index.json").string());
    index.write("{\n  \"metadata\": {\"total_size\": " + std::to_string(total) +
                "},\n  \"weight_map\": {\n    " + weight_map + "\n  }\n}\n");
    index.commit();
  }
  return total;
}

// Writes a HF checkpoint directory: the tensors as write_hf_safetensors does, then `config_json` as
// its config.json; `directory` is replaced as a whole, and only once every file is written and synced.
// An existing `directory` holding files other than these is refused. Returns the tensor bytes written.
inline std::uint64_t write_hf_checkpoint(
    const std::string& directory, const std::string& config_json, const std::vector<hf_tensor_plan>& tensors,
    std::uint64_t max_file_bytes,
    const std::function<void(const hf_tensor_plan&, std::span<std::byte>)>& make,
    const std::function<void(const std::string&)>& log = {}, save_hooks hooks = {}) {
  directory_replacement out(directory, detail::hf_checkpoint_directory, std::move(hooks));
  const std::uint64_t total = write_hf_safetensors(out.path(), tensors, max_file_bytes, make, log);
  out.commit(config_json);
  return total;
}

}  // namespace shardgraph::io
