#pragma once
// The tensors of a HF checkpoint directory: `model.safetensors`, or the files that
// `model.safetensors.index.json` names in its "weight_map" (tensor name -> file name), as
// from_pretrained writes large models:
//   {"metadata": {"total_size": 497759232},
//    "weight_map": {"transformer.h.0.attn.c_attn.weight": "model-00001-of-00002.safetensors", ...}}
// open() validates the index and that every file it names exists, before anything is read; a file is
// opened (and its header validated) when one of its tensors is first asked for, once, and kept.
// Thread ranks of one process may share a checkpoint.
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/hf_config.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/io/safetensors.hpp"

namespace shardgraph::io {

class safetensors_checkpoint {
 public:
  static constexpr std::string_view single_file = "model.safetensors";
  static constexpr std::string_view index_file = "model.safetensors.index.json";

  // A directory with model.safetensors.index.json (preferred) or model.safetensors, or one
  // .safetensors file.
  static std::shared_ptr<const safetensors_checkpoint> open(const std::string& path) {
    namespace fs = std::filesystem;
    auto c = std::shared_ptr<safetensors_checkpoint>(new safetensors_checkpoint());
    if (fs::is_regular_file(path)) {
      c->adopt(std::make_shared<const safetensors_file>(path));
      return c;
    }
    if (!fs::is_directory(path))
      fail(path, "no such file or directory",
           "give a checkpoint directory (with model.safetensors or model.safetensors.index.json) or a "
           ".safetensors file");
    c->directory_ = path;
    const fs::path index = fs::path(path) / index_file;
    if (fs::is_regular_file(index)) {
      c->read_index(index.string());
      return c;
    }
    const fs::path single = fs::path(path) / single_file;
    if (!fs::is_regular_file(single))
      fail(path, "holds neither model.safetensors nor model.safetensors.index.json",
           "point at the directory from_pretrained / save_pretrained wrote");
    c->adopt(std::make_shared<const safetensors_file>(single.string()));
    return c;
  }

  // One file already open, as a checkpoint.
  static std::shared_ptr<const safetensors_checkpoint> of(std::shared_ptr<const safetensors_file> file) {
    auto c = std::shared_ptr<safetensors_checkpoint>(new safetensors_checkpoint());
    c->adopt(std::move(file));
    return c;
  }

  // The file holding `tensor`, opened on first use.
  const safetensors_file& file_of(std::string_view tensor) const {
    const auto it = weight_map_.find(tensor);
    if (it == weight_map_.end()) {
      std::string why = "no tensor '" + detail::shorten(tensor) + "' among the " +
                        std::to_string(weight_map_.size()) + " of the checkpoint";
      fail(where(), why, "check the name; models differ in prefixes such as 'model.' or 'transformer.'");
    }
    const safetensors_file& file = opened(it->second);
    if (!file.contains(tensor))
      fail(file.name() + ": tensor '" + detail::shorten(tensor) + "'",
           "the index " + index_path_ + " places it in this file, which does not hold it",
           "the index and the files disagree: download or save the checkpoint again");
    return file;
  }

  bool contains(std::string_view tensor) const { return weight_map_.find(tensor) != weight_map_.end(); }
  std::vector<std::string> tensor_names() const {
    std::vector<std::string> names;
    for (const auto& [name, file] : weight_map_) names.push_back(name);
    return names;
  }
  std::size_t file_count() const { return file_paths_.size(); }
  // The checkpoint in messages: its index, or its one file.
  std::string where() const { return index_path_.empty() ? *file_paths_.begin() : index_path_; }

 private:
  std::string directory_, index_path_;                          // index_path_ empty: one file
  std::map<std::string, std::string, std::less<>> weight_map_;  // tensor -> file path
  std::set<std::string> file_paths_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<const safetensors_file>> opened_;

  safetensors_checkpoint() = default;

  void adopt(std::shared_ptr<const safetensors_file> file) {
    file_paths_.insert(file->name());
    for (const tensor_info& t : file->tensors()) weight_map_.emplace(t.name, file->name());
    opened_.emplace(file->name(), std::move(file));
  }

  void read_index(const std::string& index) {
    index_path_ = index;
    const std::string how =
        "the index must be {\"weight_map\": {tensor: file, ...}}; save the checkpoint again";
    const json::value root = read_json_file(index);
    if (root.type() != json::kind::object) fail(index, "the index is not a JSON object", how);
    const json::value* map = root.find("weight_map");
    if (map == nullptr) fail(index, "\"weight_map\" is missing", how);
    if (map->type() != json::kind::object)
      fail(index, "\"weight_map\" is " + std::string(json::kind_name(map->type())) + ", not an object", how);
    for (const auto& [tensor, file] : map->as_object()) {
      if (file.type() != json::kind::string)
        fail(index + ": tensor '" + detail::shorten(tensor) + "'",
             "its file is " + std::string(json::kind_name(file.type())) + ", not a file name", how);
      const std::string& name = file.as_string();
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
        fail(index + ": tensor '" + detail::shorten(tensor) + "'",
             "its file \"" + detail::shorten(name) +
                 "\" is not a plain file name in the checkpoint's directory",
             how);
      const std::string path = (std::filesystem::path(directory_) / name).string();
      if (file_paths_.insert(path).second && !std::filesystem::is_regular_file(path))
        fail(index,
             "it names " + name + " (for tensor '" + detail::shorten(tensor) + "'), which is not in " +
                 directory_,
             "download or copy every file of the checkpoint");
      weight_map_.emplace(tensor, path);
    }
    if (weight_map_.empty()) fail(index, "\"weight_map\" names no tensors", how);
  }

  const safetensors_file& opened(const std::string& path) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto& file = opened_[path];
    if (!file) file = std::make_shared<const safetensors_file>(path);
    return *file;
  }
};

}  // namespace shardgraph::io
