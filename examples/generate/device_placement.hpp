#pragma once
// generate --max-memory cuda:0=20GiB,cpu=64GiB [--placement balanced|sequential]: the checkpoint's
// layers placed on the devices in order as HF Accelerate's device_map="auto" places them
// (plan/device_map.hpp), the map printed per layer, then run as pipeline stages
// (plan/device_map_stages.hpp): the llm's pp, each stage's layers, and which stages are the CPU's.
#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include <shardgraph/core/dtype.hpp>
#include <shardgraph/generate/llm_options.hpp>
#include <shardgraph/mesh/mesh_shape.hpp>
#include <shardgraph/plan/device_map.hpp>
#include <shardgraph/plan/device_map_stages.hpp>
#include <shardgraph/plan/hf_module_tree.hpp>
#include <shardgraph/plan/max_memory.hpp>

struct device_placement {
  std::vector<int> gpu_of_stage;  // the GPU each pipeline stage runs on; -1: the CPU
  bool uses_gpus() const {
    for (const int gpu : gpu_of_stage)
      if (gpu >= 0) return true;
    return false;
  }
};

// The host's memory, which a share such as cpu=50% is taken of.
inline std::int64_t host_memory_bytes() {
  return static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::int64_t>(sysconf(_SC_PAGE_SIZE));
}

// Places the layers of DIR's model in `type` by `max_memory`, prints the map and its stages, and
// sets o's mesh (pp = the stages), stage layers and host stages. `gpu_totals` (per GPU index) give
// what a GPU's share is taken of, and how many GPUs are visible.
inline device_placement place_on_devices(const std::string& directory, shardgraph::dtype type,
                                         const std::string& max_memory, const std::string& strategy,
                                         const std::vector<std::int64_t>& gpu_totals,
                                         shardgraph::generate::llm_options& o) {
  namespace plan = shardgraph::plan;
  bool one_rank = true;
  for (const auto& [axis, size] : o.mesh.axes()) one_rank = one_rank && size == 1;
  if (!one_rank)
    shardgraph::fail("generate --max-memory", "places the layers itself, and --mesh is " + o.mesh.to_string(),
                     "leave --mesh out: the map's devices become the pipeline stages");
  const plan::max_memory budget =
      plan::parse_max_memory(max_memory, {.gpu_bytes = gpu_totals, .cpu_bytes = host_memory_bytes()});
  const plan::hf_module_tree model = plan::hf_module_tree_of(directory + "/config.json", type);
  const plan::device_map map = plan::infer_device_map(model, budget, plan::parse_placement_strategy(strategy));
  std::fputs(map.report().c_str(), stdout);
  map.check_fits();
  const plan::device_map_stages stages = plan::device_map_stages_of(map, model);
  stages.check_gpus(static_cast<int>(gpu_totals.size()));
  std::fputs(stages.report().c_str(), stdout);
  device_placement placement;
  o.host_stages.clear();
  for (const plan::device_stage& s : stages.stages) {
    placement.gpu_of_stage.push_back(s.on.is_cuda() ? s.on.index : -1);
    o.host_stages.push_back(!s.on.is_cuda());
  }
  o.mesh = shardgraph::mesh_shape{{"pp", static_cast<int>(stages.stages.size())}};
  o.stage_layers = stages.stage_layers();
  return placement;
}
