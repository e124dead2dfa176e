#pragma once
// module_tree: a model as PyTorch's module hierarchy sees it, the input of HF Accelerate's
// placement (plan/device_map.hpp): modules with their direct parameters, child modules and
// buffers, each tensor with its bytes in the dtype the model is loaded in.
//
//   ""                      GPT2LMHeadModel
//   transformer             GPT2Model
//   transformer.wte         Embedding        weight (vocab, model)
//   transformer.h.0         GPT2Block        (never split: module_tree::no_split)
//   lm_head                 Linear           weight: the same tensor as transformer.wte.weight (tied)
//
// module_sizes is Accelerate's compute_module_sizes over it: each tensor's bytes added to its own
// name and to every prefix of it ("transformer.h.0.ln_1.weight" counts in "transformer.h.0.ln_1",
// "transformer.h.0", "transformer.h", "transformer" and ""), a tied tensor counted once, under
// the name met first (named_parameters() order). Names no tensor lies under have no entry (size 0).
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "shardgraph/core/error.hpp"

namespace shardgraph::plan {

struct module_entry {
  std::string name{};        // the full dotted name; the root's is ""
  std::string class_name{};  // "GPT2Block"; "Parameter" or "Buffer" for a tensor
  bool tensor = false;
  std::int64_t bytes = 0;         // a tensor's own bytes
  std::string same_tensor_as{};   // a tied parameter: the name of the one it shares its tensor with
  std::vector<int> parameters{};  // direct parameters, direct child modules, direct buffers: indices
  std::vector<int> children{};    // into module_tree::entries, in registration order
  std::vector<int> buffers{};
};

struct module_tree {
  std::vector<module_entry> entries{module_entry{.name = "", .class_name = "Module"}};  // [0]: the root
  std::vector<std::string> no_split;  // class names placed whole (HF's _no_split_modules)

  // Adds a child module of `parent` named parent.local; returns its index.
  int add_module(int parent, const std::string& local, const std::string& class_name) {
    return add(parent, local, {.class_name = class_name}, &module_entry::children);
  }
  int add_parameter(int module, const std::string& local, std::int64_t bytes) {
    return add(module, local, {.class_name = "Parameter", .tensor = true, .bytes = bytes},
               &module_entry::parameters);
  }
  // A parameter holding the same tensor as the parameter named `shared` (registered before it).
  int add_tied_parameter(int module, const std::string& local, const std::string& shared) {
    const int i = add(module, local, {.class_name = "Parameter", .tensor = true}, &module_entry::parameters);
    entries[static_cast<std::size_t>(i)].same_tensor_as = shared;
    return i;
  }
  int add_buffer(int module, const std::string& local, std::int64_t bytes) {
    return add(module, local, {.class_name = "Buffer", .tensor = true, .bytes = bytes},
               &module_entry::buffers);
  }

  const module_entry& operator[](int i) const { return entries[static_cast<std::size_t>(i)]; }
  bool placed_whole(int i) const {
    const module_entry& e = (*this)[i];
    if (e.tensor || e.children.empty()) return true;
    for (const std::string& c : no_split)
      if (c == e.class_name) return true;
    return false;
  }
  // The root's parameters, children and buffers: where Accelerate's walks start.
  std::vector<int> top_level() const {
    const module_entry& root = entries.front();
    std::vector<int> out(root.parameters);
    out.insert(out.end(), root.children.begin(), root.children.end());
    out.insert(out.end(), root.buffers.begin(), root.buffers.end());
    return out;
  }
  // Index of the entry named `name`; -1 when none is.
  int find(const std::string& name) const {
    const auto it = by_name.find(name);
    return it == by_name.end() ? -1 : it->second;
  }

  // Groups of parameter names sharing one tensor, each sorted (Accelerate's find_tied_parameters).
  std::vector<std::vector<std::string>> tied_groups() const {
    std::vector<std::vector<std::string>> groups;
    for (const module_entry& e : entries) {
      if (e.same_tensor_as.empty()) continue;
      std::vector<std::string> g{e.same_tensor_as, e.name};
      std::sort(g.begin(), g.end());
      groups.push_back(g);
    }
    return groups;
  }

 private:
  std::unordered_map<std::string, int> by_name{{"", 0}};

  int add(int parent, const std::string& local, module_entry e, std::vector<int> module_entry::*list) {
    const module_entry& p = (*this)[parent];
    e.name = p.name.empty() ? local : p.name + "." + local;
    if (by_name.contains(e.name))
      fail("module_tree", "'" + e.name + "' is added twice", "give each module and tensor one name");
    const int i = static_cast<int>(entries.size());
    by_name.emplace(e.name, i);
    entries.push_back(std::move(e));
    (entries[static_cast<std::size_t>(parent)].*list).push_back(i);
    return i;
  }
};

// Bytes per name, as compute_module_sizes returns them; `names` keeps its insertion order, which
// get_balanced_memory reads.
struct module_sizes {
  std::vector<std::string> names;
  std::unordered_map<std::string, std::int64_t> bytes;

  std::int64_t of(const std::string& name) const {
    const auto it = bytes.find(name);
    return it == bytes.end() ? 0 : it->second;
  }
  std::int64_t total() const { return of(""); }
  void add(const std::string& name, std::int64_t b) {
    auto [it, added] = bytes.emplace(name, 0);
    if (added) names.push_back(name);
    it->second += b;
  }
};

namespace detail {
// named_parameters() then named_buffers(), depth first, a tied duplicate left out.
inline void collect_tensors(const module_tree& t, int i, bool buffers, std::vector<int>& out) {
  const module_entry& e = t[i];
  for (int p : buffers ? e.buffers : e.parameters)
    if (t[p].same_tensor_as.empty()) out.push_back(p);
  for (int c : e.children) collect_tensors(t, c, buffers, out);
}
}  // namespace detail

inline module_sizes compute_module_sizes(const module_tree& t) {
  std::vector<int> tensors;
  detail::collect_tensors(t, 0, false, tensors);
  detail::collect_tensors(t, 0, true, tensors);
  module_sizes s;
  for (int i : tensors) {
    const std::string& name = t[i].name;
    s.add("", t[i].bytes);
    for (std::size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1))
      s.add(name.substr(0, dot), t[i].bytes);
    s.add(name, t[i].bytes);
  }
  return s;
}

}  // namespace shardgraph::plan
