#pragma once
// device_map: device_map="auto" for a GPT-2 or LLaMA checkpoint: which device holds each layer,
// equal to HF Accelerate's infer_auto_device_map for the same model, dtype and budget
// (plan/accelerate_placement.hpp says how; tests/golden/make_device_maps.py checks it).
//
//   const auto model = plan::hf_module_tree_of("ckpt/config.json", dtype::bf16);
//   const auto map = plan::infer_device_map(model, plan::parse_max_memory("cuda:0=2GiB,cpu=64GiB"),
//                                           plan::placement_strategy::balanced);
//   std::cout << map.report();
//
//   device map (balanced, bf16), budget cuda:0=2147483648,cpu=68719476736     (TinyLlama-1.1B)
//     model.embed_tokens  cuda:0  131072000 bytes (125.00 MiB)
//     model.layers.0      cuda:0  88088576 bytes (84.01 MiB)
//     ...
//     model.layers.21     cpu     88088576 bytes (84.01 MiB)
//     model.norm          cpu     4096 bytes (0.00 MiB)
//     model.rotary_emb    cpu     128 bytes (0.00 MiB)
//     lm_head             cpu     131072000 bytes (125.00 MiB)
//   cuda:0: 22 modules, 1980932096 bytes (1.84 GiB) of 2147483648 bytes (2.00 GiB)
//   cpu: 4 modules, 219164800 bytes (209.01 MiB) of 68719476736 bytes (64.00 GiB)
//
// One line per module the placement keeps whole (each decoder layer, the embeddings, the final
// norm, lm_head); a tied lm_head reads "tied to <embedding>". Modules Accelerate would put on
// "disk" are printed as such; check_fits() refuses them, saying how many bytes are missing.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/bytes_text.hpp"
#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/plan/accelerate_placement.hpp"
#include "shardgraph/plan/hf_module_tree.hpp"
#include "shardgraph/plan/max_memory.hpp"
#include "shardgraph/plan/module_tree.hpp"

namespace shardgraph::plan {

// "sequential" fills each GPU in turn; "balanced" (HF's device_map="auto") first caps every GPU
// but the last near an even share of the model.
enum class placement_strategy { sequential, balanced };

inline std::string_view placement_strategy_name(placement_strategy s) {
  return s == placement_strategy::sequential ? "sequential" : "balanced";
}

// "sequential", "balanced", or "auto" (balanced, as transformers reads device_map="auto").
inline placement_strategy parse_placement_strategy(std::string_view text) {
  if (text == "sequential") return placement_strategy::sequential;
  if (text == "balanced" || text == "auto") return placement_strategy::balanced;
  fail("device map", "'" + std::string(text) + "' is not a placement strategy",
       "use auto, balanced or sequential");
}

struct placed_module {
  std::string name;
  device on;
  std::int64_t bytes = 0;
  std::string tied_to{};  // the module whose table a tied module shares (its bytes are counted there)
};

struct device_map {
  placement_strategy strategy = placement_strategy::balanced;
  dtype type = dtype::f32;
  max_memory budget;                   // as given
  max_memory filled;                   // as filled: for balanced, with the GPUs capped
  accelerate_map map;                  // Accelerate's map: module name (or prefix) -> device
  std::vector<placed_module> modules;  // every module kept whole that holds a tensor, in model order

  // The device of `module`: that of the longest name in the map that is it or encloses it.
  device of(const std::string& module) const {
    const std::pair<std::string, device>* best = nullptr;
    for (const auto& entry : map) {
      const std::string& k = entry.first;
      if ((k.empty() || module == k || module.starts_with(k + ".")) &&
          (!best || k.size() > best->first.size()))
        best = &entry;
    }
    if (!best) fail("device map", "no device is given for '" + module + "'", "place the whole model");
    return best->second;
  }

  // Bytes of weights on each device, in device order (devices holding nothing left out).
  std::vector<device_budget> bytes_per_device() const {
    std::vector<device_budget> out;
    for (const placed_module& m : modules) {
      auto at = std::find_if(out.begin(), out.end(), [&](const device_budget& b) { return b.on == m.on; });
      if (at == out.end()) at = out.insert(out.end(), {m.on, 0});
      at->bytes += m.bytes;
    }
    std::sort(out.begin(), out.end(),
              [](const device_budget& a, const device_budget& b) { return a.on < b.on; });
    return out;
  }

  // Throws when a module would go to disk, naming them and the bytes the devices lack.
  void check_fits() const {
    std::string names;
    std::int64_t missing = 0;
    for (const placed_module& m : modules)
      if (m.on == device::disk()) names += (names.empty() ? "" : ", ") + m.name, missing += m.bytes;
    if (names.empty()) return;
    fail("device map",
         names + " (" + bytes_text(static_cast<std::size_t>(missing)) + ") do not fit " + budget.text() +
             ": Accelerate would put them on disk, and shardgraph runs no layer from disk",
         "give the devices at least " + bytes_text(static_cast<std::size_t>(missing)) +
             " more, e.g. a larger cpu= budget in --max-memory");
  }

  std::string report() const;
};

namespace detail {

inline bool holds_tensor(const module_tree& t, int i) {
  if (t[i].tensor) return true;
  const module_entry& e = t[i];
  return !e.parameters.empty() || !e.buffers.empty() ||
         std::any_of(e.children.begin(), e.children.end(), [&](int c) { return holds_tensor(t, c); });
}

// The modules kept whole under the root (get_max_layer_size's walk) that hold a tensor.
inline std::vector<int> whole_modules(const module_tree& t) {
  std::vector<int> out, todo = t.top_level();
  std::reverse(todo.begin(), todo.end());
  while (!todo.empty()) {
    const int i = todo.back();
    todo.pop_back();
    if (t.placed_whole(i)) {
      if (holds_tensor(t, i)) out.push_back(i);
      continue;
    }
    todo.insert(todo.end(), t[i].children.rbegin(), t[i].children.rend());
  }
  return out;
}

}  // namespace detail

// A map written by hand (module name or prefix -> device, "" for the whole model), as
// from_pretrained(device_map={...}) takes one: described as infer_device_map describes its own.
// Throws when a module holding tensors has no device.
inline device_map explicit_device_map(const hf_module_tree& model, accelerate_map map,
                                      const max_memory& budget,
                                      placement_strategy s = placement_strategy::sequential) {
  const module_sizes sizes = compute_module_sizes(model.tree);
  device_map m{.strategy = s,
               .type = model.type,
               .budget = budget,
               .filled = budget,
               .map = std::move(map),
               .modules = {}};
  for (int i : detail::whole_modules(model.tree)) {
    const std::string& name = model.tree[i].name;
    placed_module p{.name = name, .on = m.of(name), .bytes = sizes.of(name)};
    if (name == "lm_head" && !model.tied_head.empty()) p.tied_to = model.tied_head;
    m.modules.push_back(p);
  }
  return m;
}

// Places `model` on the devices of `budget` as Accelerate's infer_auto_device_map does with
// no_split_module_classes = the model's decoder layer class (after get_balanced_memory for balanced).
inline device_map infer_device_map(const hf_module_tree& model, const max_memory& budget,
                                   placement_strategy s) {
  if (budget.budgets.empty())
    fail("device map", "the budget names no device", "give --max-memory, e.g. cuda:0=20GiB,cpu=64GiB");
  const module_sizes sizes = compute_module_sizes(model.tree);
  const max_memory filled =
      s == placement_strategy::balanced ? balanced_max_memory(model.tree, sizes, budget) : budget;
  device_map m = explicit_device_map(model, accelerate_device_map(model.tree, sizes, filled), budget, s);
  m.filled = filled;
  return m;
}

inline std::string device_map::report() const {
  std::size_t width = 0;
  for (const placed_module& m : modules) width = std::max(width, m.name.size());
  std::string t = "device map (" + std::string(placement_strategy_name(strategy)) + ", " +
                  std::string(dtype_name(type)) + "), budget " + budget.text() + "\n";
  for (const placed_module& m : modules) {
    const std::string on = m.on.text();
    t += "  " + m.name + std::string(width + 2 - m.name.size(), ' ') + on +
         std::string(8 - std::min<std::size_t>(on.size(), 7), ' ');
    t += m.tied_to.empty() ? bytes_text(static_cast<std::size_t>(m.bytes)) : "tied to " + m.tied_to;
    t += '\n';
  }
  for (const device_budget& b : bytes_per_device()) {
    const auto count =
        std::count_if(modules.begin(), modules.end(), [&](const placed_module& m) { return m.on == b.on; });
    t += b.on.text() + ": " + std::to_string(count) + (count == 1 ? " module, " : " modules, ") +
         bytes_text(static_cast<std::size_t>(b.bytes));
    t += b.on == device::disk() ? " (refused: shardgraph runs no layer from disk)\n"
                                : " of " + bytes_text(static_cast<std::size_t>(budget.of(b.on))) + "\n";
  }
  return t;
}

}  // namespace shardgraph::plan
