#pragma once
// device_map_stages: a device map (plan/device_map.hpp) as the pipeline that runs it: one stage per
// run of consecutive decoder layers on one device, in layer order; the embedding on the first stage,
// the final norm and lm_head on the last. Each stage computes on its device's backend: cuda:i on the
// cuda backend on GPU i, cpu on the cpu backend; activations cross between stages as a pipeline's do.
//
//   const auto stages = plan::device_map_stages_of(map, model);
//   options.stage_layers = stages.stage_layers();          // pipeline_options: {21, 1}
//   std::cout << stages.report();
//
//   stage 0: cuda:0 (cuda backend, GPU 0): embedding + layers 0-20 (21)      (the map of device_map.hpp)
//   stage 1: cpu (cpu backend): layer 21 (1) + head
//
// Accelerate fills the devices in order, so its layers come in runs, one per device; what the
// pipeline runs elsewhere than the map says is listed in `moves`, and allowed only when the
// receiving device's budget still holds it:
//   - the embedding placed on a device before the first layer's (the first layer did not fit
//     there) runs on the first stage; the final norm or lm_head placed after the last layer's
//     device runs on the last stage. On cuda:0 and the CPU the room Accelerate reserves for the
//     largest layer holds such a module;
//   - a tied lm_head, which Accelerate keeps with the embedding, runs on the last stage with a
//     copy of the table there.
// A device holding two separate runs of layers, a module on "disk" or without a device, or a move
// the budget does not hold is an error naming the modules and devices.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/core/bytes_text.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/pipeline/partition.hpp"
#include "shardgraph/plan/device_map.hpp"
#include "shardgraph/plan/hf_module_tree.hpp"
#include "shardgraph/plan/max_memory.hpp"

namespace shardgraph::plan {

struct device_stage {
  device on;  // cuda:i: the cuda backend on GPU i; cpu: the cpu backend
  std::int64_t first_layer = 0, layers = 0;
};

struct device_map_stages {
  std::vector<device_stage> stages;  // in pipeline order; the first holds the embedding, the last the head
  std::vector<std::string> moves{};  // modules run on another device than the map's, each with why

  // The layer count of each stage: pipeline_options::stage_layers.
  std::vector<std::int64_t> stage_layers() const {
    std::vector<std::int64_t> counts;
    for (const device_stage& s : stages) counts.push_back(s.layers);
    return counts;
  }
  pipeline::stage_partition partition() const {
    const std::vector<std::int64_t> counts = stage_layers();
    const std::int64_t total = stages.empty() ? 0 : stages.back().first_layer + stages.back().layers;
    return pipeline::partition_layers(total, static_cast<int>(stages.size()), counts);
  }

  // Throws unless every GPU a stage runs on is among the `visible` ones (cuda:0 .. visible-1).
  void check_gpus(int visible) const {
    for (std::size_t j = 0; j < stages.size(); ++j)
      if (stages[j].on.is_cuda() && stages[j].on.index >= visible)
        fail("device map",
             "stage " + std::to_string(j) + " runs on " + stages[j].on.text() + ", but " +
                 std::to_string(visible) + (visible == 1 ? " GPU is" : " GPUs are") + " visible",
             visible == 0 ? std::string("give --max-memory the cpu alone (cpu=64GiB)")
                          : "give --max-memory only the visible GPUs (cuda:0 to cuda:" +
                                std::to_string(visible - 1) + ")");
  }

  // One line per stage, then one per move.
  std::string report() const {
    std::string t;
    for (std::size_t j = 0; j < stages.size(); ++j) {
      const device_stage& s = stages[j];
      t +=
          "stage " + std::to_string(j) + ": " + s.on.text() +
          (s.on.is_cuda() ? " (cuda backend, GPU " + std::to_string(s.on.index) + "): " : " (cpu backend): ");
      if (j == 0) t += "embedding + ";
      const std::int64_t last = s.first_layer + s.layers - 1;
      t += s.layers == 1 ? "layer " + std::to_string(s.first_layer)
                         : "layers " + std::to_string(s.first_layer) + "-" + std::to_string(last);
      t += " (" + std::to_string(s.layers) + ")";
      if (j + 1 == stages.size()) t += " + head";
      t += '\n';
    }
    for (const std::string& m : moves) t += "moved: " + m + '\n';
    return t;
  }
};

namespace detail {

inline const placed_module& placed(const device_map& map, const std::string& name) {
  const auto it = std::find_if(map.modules.begin(), map.modules.end(),
                               [&](const placed_module& m) { return m.name == name; });
  if (it == map.modules.end())
    fail("device map", "'" + name + "' is not a module of the map",
         "describe the map with the model it places");
  return *it;
}

// Runs of consecutive layers on one device; a device met again after another is refused.
inline std::vector<device_stage> layer_runs(const device_map& map, const hf_module_tree& model) {
  std::vector<device_stage> runs;
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const device on = placed(map, model.layers[i]).on;
    if (!runs.empty() && runs.back().on == on) {
      ++runs.back().layers;
      continue;
    }
    for (const device_stage& r : runs)
      if (r.on == on)
        fail("device map",
             on.text() + " holds layers " + std::to_string(r.first_layer) + "-" +
                 std::to_string(r.first_layer + r.layers - 1) + " and layer " + std::to_string(i) +
                 ", with other devices between: a device runs one pipeline stage",
             "place each device's layers together, in layer order, as Accelerate does");
    runs.push_back({on, static_cast<std::int64_t>(i), 1});
  }
  if (runs.empty())
    fail("device map", "the model has no decoder layer", "give a model with at least one layer");
  return runs;
}

// Running module `name` (of `bytes`) on `to` rather than `from`: refused unless `to`'s budget holds it
// on top of what the map puts there and what moved there before.
struct move_ledger {
  const device_map& map;
  std::vector<device_budget> used = map.bytes_per_device();

  void move(const std::string& name, device from, device to, std::int64_t bytes, const std::string& why) {
    auto at = std::find_if(used.begin(), used.end(), [&](const device_budget& b) { return b.on == to; });
    const std::int64_t before = at == used.end() ? 0 : at->bytes, budget = map.budget.of(to);
    if (before + bytes > budget)
      fail("device map",
           name + " (" + bytes_text(static_cast<std::size_t>(bytes)) + ") is on " + from.text() + ", but " +
               why + ", and " + to.text() + " holds " + bytes_text(static_cast<std::size_t>(before)) +
               " of its " + bytes_text(static_cast<std::size_t>(budget)),
           "give " + to.text() + " at least " + bytes_text(static_cast<std::size_t>(before + bytes)) +
               " in --max-memory, or " + from.text() + " room for the layers next to it");
    if (at == used.end()) at = used.insert(used.end(), {to, 0});
    at->bytes += bytes;
  }
};

}  // namespace detail

// The pipeline stages that run `map` (made for `model`). Throws as the top of this file says.
inline device_map_stages device_map_stages_of(const device_map& map, const hf_module_tree& model) {
  map.check_fits();
  device_map_stages out{.stages = detail::layer_runs(map, model)};
  detail::move_ledger ledger{map};
  const device first = out.stages.front().on, last = out.stages.back().on;
  for (const std::string& name : model.embedding) {
    const placed_module& m = detail::placed(map, name);
    if (m.on == first) continue;
    ledger.move(name, m.on, first, m.bytes,
                "the embedding runs on the first stage, with layer 0 on " + first.text());
    out.moves.push_back(name + " runs on " + first.text() + " (the map says " + m.on.text() +
                        "): the first stage holds the embedding");
  }
  for (const std::string& name : model.head) {
    const placed_module& m = detail::placed(map, name);
    if (!m.tied_to.empty()) {  // its table is the embedding's, on the first stage
      if (first == last) continue;
      const placed_module& table = detail::placed(map, m.tied_to);
      ledger.move(name, first, last, table.bytes, "the head runs on the last stage, on " + last.text());
      out.moves.push_back(name + " (tied to " + m.tied_to + ") runs on " + last.text() +
                          " with the last stage, which holds a copy of the table (" +
                          bytes_text(static_cast<std::size_t>(table.bytes)) + ")");
      continue;
    }
    if (m.on == last) continue;
    ledger.move(name, m.on, last, m.bytes,
                "the head runs on the last stage, with the last layer on " + last.text());
    out.moves.push_back(name + " runs on " + last.text() + " (the map says " + m.on.text() +
                        "): the last stage holds the head");
  }
  return out;
}

}  // namespace shardgraph::plan
