#pragma once
// accelerate_placement: HF Accelerate's infer_auto_device_map, get_balanced_memory and
// clean_device_map (accelerate 1.16, accelerate/utils/modeling.py), step for step, over a
// module_tree. The golden maps of tests/golden/make_device_maps.py are these functions' output in
// Python; the test compares every one. The rules, in Accelerate's words and ours:
//
//   - Modules are taken in registration order from a queue holding the root's parameters, children
//     and buffers. A module goes on the current device if it fits; if not, a module that may be
//     split (it has children and its class is not in no_split) is replaced in the queue by its
//     direct parameters and children; else the device is closed and the next one tried.
//   - The first GPU and the CPU keep room for the largest unsplittable layer still queued (the
//     "reserve"), so that a layer offloaded to the CPU can be brought back to run.
//   - A module whose parameter is tied to a parameter of a module still queued takes that module
//     along (lm_head with the embedding), counting its bytes with it.
//   - After the GPUs and the CPU comes the disk, which holds whatever is left.
//   - balanced: every GPU but the last is capped at model bytes / GPUs plus 1.25 times the larger
//     of the first no-split layer's bytes and the mean bytes of the leaf modules; a lone GPU whose
//     budget was measured, not given (max_memory::measured), keeps 10 % free.
//   - clean: where every module under a name went to one device, the name stands for them all.
//
// Accelerate's fallback_allocation, offload_buffers and low_zero are left at their defaults (off).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/plan/max_memory.hpp"
#include "shardgraph/plan/module_tree.hpp"

namespace shardgraph::plan {

// Module name -> device, as Accelerate's OrderedDict holds it.
using accelerate_map = std::vector<std::pair<std::string, device>>;

namespace detail {

struct largest_layer {
  std::int64_t bytes = 0;
  std::vector<std::string> names;
};

// get_max_layer_size: the largest module placed whole among `queue` and what it splits into.
// `modules_only` leaves the queue's tensors out, as Accelerate does on every call but the first.
inline largest_layer max_layer_size(const module_tree& t, const module_sizes& s, const std::deque<int>& queue,
                                    bool modules_only) {
  std::deque<int> todo;
  for (int i : queue)
    if (!modules_only || !t[i].tensor) todo.push_back(i);
  largest_layer best;
  while (!todo.empty()) {
    const int i = todo.front();
    todo.pop_front();
    if (!t.placed_whole(i)) {
      const std::vector<int>& c = t[i].children;
      todo.insert(todo.begin(), c.begin(), c.end());
      continue;
    }
    const std::int64_t size = s.of(t[i].name);
    if (size > best.bytes)
      best = {size, {t[i].name}};
    else if (size == best.bytes)
      best.names.push_back(t[i].name);
  }
  return best;
}

// Python's `a in b` for the names with a dot appended, as Accelerate tests "inside the module".
inline bool inside(const std::string& module, const std::string& tensor) {
  return (tensor + ".").find(module + ".") != std::string::npos;
}

// The tied parameters outside `name` whose group has a member inside it.
inline std::vector<std::string> tied_outside(const std::vector<std::vector<std::string>>& groups,
                                             const std::string& name) {
  std::vector<std::string> out;
  for (const std::vector<std::string>& g : groups) {
    const bool any = std::any_of(g.begin(), g.end(), [&](const std::string& k) { return inside(name, k); });
    const bool all = std::all_of(g.begin(), g.end(), [&](const std::string& k) { return inside(name, k); });
    if (!any || all) continue;
    for (const std::string& p : g)
      if (!inside(name, p)) out.push_back(p);
  }
  return out;
}

struct with_ties {
  std::int64_t bytes = 0;
  std::vector<int> modules;  // the queued modules holding the tied parameters
};

// get_module_size_with_ties.
inline with_ties module_size_with_ties(const module_tree& t, const module_sizes& s,
                                       const std::vector<std::string>& tied, std::int64_t module_bytes,
                                       const std::deque<int>& queue) {
  with_ties w{module_bytes, {}};
  for (const std::string& p : tied) {
    const auto holder = std::find_if(queue.begin(), queue.end(),
                                     [&](int i) { return p == t[i].name || p.starts_with(t[i].name + "."); });
    if (holder == queue.end())
      fail("infer_device_map", "the module holding '" + p + "' (tied) was placed before its tie",
           "tie parameters only to modules registered after the first one");
    w.modules.push_back(*holder);
    w.bytes += s.of(t[*holder].name) - s.of(p);
  }
  return w;
}

// device_map[name] = on: a name placed again keeps its place and takes the new device.
inline void assign(accelerate_map& map, const std::string& name, device on) {
  for (auto& [k, d] : map)
    if (k == name) {
      d = on;
      return;
    }
  map.emplace_back(name, on);
}

inline void prepend_parts(const module_tree& t, int module, std::deque<int>& queue) {
  const module_entry& e = t[module];
  queue.insert(queue.begin(), e.children.begin(), e.children.end());
  queue.insert(queue.begin(), e.parameters.begin(), e.parameters.end());
}

// The tied-module branch: splits the first tied module that may be split, putting `module` back
// first. False when none may.
inline bool split_a_tied_module(const module_tree& t, int module, const std::vector<int>& tied_modules,
                                std::deque<int>& queue) {
  for (int tied : tied_modules) {
    if (t.placed_whole(tied)) continue;
    const auto at = std::find(queue.begin(), queue.end(), tied);
    const auto after = queue.erase(at);
    const module_entry& e = t[tied];
    std::vector<int> parts(e.parameters);
    parts.insert(parts.end(), e.children.begin(), e.children.end());
    queue.insert(after, parts.begin(), parts.end());
    queue.push_front(module);
    return true;
  }
  return false;
}

// clean_device_map, recursively from `module_name`.
inline void clean_device_map(accelerate_map& map, const std::string& module_name) {
  const std::string prefix = module_name.empty() ? "" : module_name + ".";
  std::set<device> values;
  std::size_t under = 0;
  for (const auto& [k, d] : map)
    if (k.starts_with(prefix)) values.insert(d), ++under;
  if (values.size() == 1 && under > 1) {
    std::erase_if(map, [&](const auto& kv) { return kv.first.starts_with(prefix); });
    map.emplace_back(module_name, *values.begin());
  }
  const std::size_t depth =
      module_name.empty()
          ? 1
          : static_cast<std::size_t>(std::count(module_name.begin(), module_name.end(), '.')) + 2;
  std::set<std::string> children;
  for (const auto& [k, d] : map) {
    if (!k.starts_with(prefix) || k.size() <= module_name.size()) continue;
    std::size_t end = 0;
    for (std::size_t parts = 0; parts < depth && end != std::string::npos; ++parts)
      end = k.find('.', parts == 0 ? 0 : end + 1);
    children.insert(k.substr(0, end));
  }
  for (const std::string& child : children) clean_device_map(map, child);
}

}  // namespace detail

// infer_auto_device_map(model, max_memory, no_split_module_classes = t.no_split), cleaned.
inline accelerate_map accelerate_device_map(const module_tree& t, const module_sizes& s,
                                            const max_memory& budget) {
  using namespace detail;
  std::vector<device> devices;
  for (const device_budget& b : budget.budgets) devices.push_back(b.on);
  devices.push_back(device::disk());
  std::vector<device> main_devices{device::cpu()};
  if (devices.front().is_cuda()) main_devices.insert(main_devices.begin(), devices.front());
  const std::vector<std::vector<std::string>> tied_groups = t.tied_groups();
  const std::vector<int> top = t.top_level();
  std::deque<int> queue(top.begin(), top.end());
  std::map<device, std::int64_t> used;
  accelerate_map placed;
  std::size_t current = 0;
  largest_layer largest = max_layer_size(t, s, queue, false);
  while (!queue.empty()) {
    const int module = queue.front();
    queue.pop_front();
    const std::string& name = t[module].name;
    std::erase_if(largest.names,
                  [&](const std::string& n) { return n == name || n.starts_with(name + "."); });
    if (largest.names.empty()) largest = max_layer_size(t, s, queue, true);
    const std::int64_t module_bytes = s.of(name);
    const std::vector<std::string> tied = tied_outside(tied_groups, name);
    const device on = devices[current];
    const bool unbounded = on == device::disk();
    std::int64_t room = unbounded ? 0 : budget.of(on), reserved = 0;
    if (std::find(main_devices.begin(), main_devices.end(), on) != main_devices.end())
      room -= largest.bytes, reserved = largest.bytes;
    const with_ties w = module_size_with_ties(t, s, tied, module_bytes, queue);
    if (unbounded || used[on] + w.bytes <= room) {
      used[on] += w.bytes;
      assign(placed, name, on);
      for (int m : w.modules) {
        if (const auto at = std::find(queue.begin(), queue.end(), m); at != queue.end()) queue.erase(at);
        assign(placed, t[m].name, on);
      }
      continue;
    }
    if (!tied.empty() && used[on] + module_bytes <= room &&
        split_a_tied_module(t, module, w.modules, queue)) {
      largest = max_layer_size(t, s, queue, true);
      continue;
    }
    if (used[on] + module_bytes >= room && !t.placed_whole(module)) {
      prepend_parts(t, module, queue);
      largest = max_layer_size(t, s, queue, true);
      continue;
    }
    used[on] += reserved;  // the device is closed: the module goes on to the next one
    ++current;
    queue.push_front(module);
  }
  clean_device_map(placed, "");
  return placed;
}

// get_balanced_memory(model, max_memory, no_split_module_classes = t.no_split), low_zero off.
inline max_memory balanced_max_memory(const module_tree& t, const module_sizes& s, max_memory budget) {
  std::vector<device_budget*> gpus;
  for (device_budget& b : budget.budgets)
    if (b.on.is_cuda() && b.bytes > 0) gpus.push_back(&b);
  if (gpus.empty()) return budget;
  if (gpus.size() == 1 && budget.measured) {  // "90% is a good compromise" (the rest for activations)
    gpus.front()->bytes =
        static_cast<std::int64_t>(std::floor(static_cast<double>(gpus.front()->bytes) * 0.9));
    return budget;
  }
  std::int64_t per_gpu = s.total() / static_cast<std::int64_t>(gpus.size());
  // The first module of each no-split class met, in compute_module_sizes' order.
  std::map<std::string, std::int64_t> no_split_bytes;
  for (const std::string& name : s.names) {
    const int i = name.empty() ? -1 : t.find(name);
    if (i < 0) continue;
    const std::string& c = t[i].class_name;
    if (std::find(t.no_split.begin(), t.no_split.end(), c) != t.no_split.end())
      no_split_bytes.emplace(c, s.of(name));
  }
  std::int64_t buffer = 0;
  for (const auto& [c, b] : no_split_bytes) buffer = std::max(buffer, b);
  // get_module_leaves twice: the tensors, then the innermost modules holding them.
  const auto leaves = [](const std::vector<std::string>& names) {
    std::map<std::string, int> children;
    for (const std::string& n : names)
      if (const std::size_t dot = n.rfind('.'); !n.empty() && dot != std::string::npos)
        ++children[n.substr(0, dot)];
    std::vector<std::string> out;
    for (const std::string& n : names)
      if (!n.empty() && !children.contains(n)) out.push_back(n);
    return out;
  };
  const std::vector<std::string> tensors = leaves(s.names);
  const std::set<std::string> tensor_set(tensors.begin(), tensors.end());
  std::vector<std::string> modules;
  for (const std::string& n : s.names)
    if (!tensor_set.contains(n)) modules.push_back(n);
  const std::vector<std::string> final_modules = leaves(modules);
  std::int64_t sum = 0;
  for (const std::string& n : final_modules) sum += s.of(n);
  const auto mean = static_cast<std::int64_t>(
      static_cast<double>(sum) / static_cast<double>(std::max<std::size_t>(final_modules.size(), 1)));
  per_gpu += static_cast<std::int64_t>(1.25 * static_cast<double>(std::max(buffer, mean)));
  for (std::size_t g = 0; g + 1 < gpus.size(); ++g) gpus[g]->bytes = std::min(per_gpu, gpus[g]->bytes);
  return budget;
}

}  // namespace shardgraph::plan
