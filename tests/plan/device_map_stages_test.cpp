// plan::device_map_stages_of: a device map as pipeline stages (one per run of layers on one device,
// embedding first, head last), on every golden map Accelerate made and on maps written by hand that
// are not contiguous, leave a module on disk or move one past its budget.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <shardgraph/io/hf_config.hpp>
#include <shardgraph/plan/device_map_stages.hpp>

#include "catch.hpp"

namespace {

namespace sg = shardgraph;
using sg::plan::device;

const std::string golden_dir = SHARDGRAPH_GOLDEN_DIR;

sg::plan::hf_module_tree golden_model(const std::string& config, sg::dtype type = sg::dtype::f32) {
  return sg::plan::hf_module_tree_of(golden_dir + "/" + config, type);
}

using sg::testing::error_of;

// Every layer runs on the device the map gives it, the stages cover the layers in order, each
// device runs one stage, and the split is the one pipeline_options::stage_layers takes.
void check_stages_follow_the_map(const sg::plan::device_map& map, const sg::plan::hf_module_tree& model,
                                 const sg::plan::device_map_stages& stages) {
  std::int64_t next = 0;
  std::set<device> devices;
  for (const sg::plan::device_stage& s : stages.stages) {
    CHECK(s.first_layer == next);
    CHECK(s.layers >= 1);
    CHECK(devices.insert(s.on).second);
    for (std::int64_t i = s.first_layer; i < s.first_layer + s.layers; ++i)
      CHECK(map.of(model.layers[static_cast<std::size_t>(i)]) == s.on);
    next += s.layers;
  }
  CHECK(next == static_cast<std::int64_t>(model.layers.size()));
  const sg::pipeline::stage_partition p = stages.partition();
  CHECK(p.stages() == static_cast<int>(stages.stages.size()));
  CHECK(p.layers() == next);
}

}  // namespace

TEST_CASE("every golden Accelerate map without disk runs as contiguous stages",
          "[plan][device_map][golden]") {
  const sg::io::json::value golden = sg::io::read_json_file(golden_dir + "/device_maps/device_maps.json");
  int converted = 0, several_stages = 0, refused_moves = 0, refused_disk = 0;
  for (const auto& c : golden.at("cases").as_array()) {
    const std::string dtype = c.at("dtype").as_string();
    if (dtype != "f32") continue;  // the other dtypes give the same shapes of maps
    const auto model = golden_model(c.at("config").as_string());
    INFO(c.at("model").as_string() << " " << c.at("strategy").as_string() << " "
                                   << c.at("max_memory").as_string());
    const auto map =
        sg::plan::infer_device_map(model, sg::plan::parse_max_memory(c.at("max_memory").as_string()),
                                   sg::plan::parse_placement_strategy(c.at("strategy").as_string()));
    const std::string refused = error_of([&] { (void)sg::plan::device_map_stages_of(map, model); });
    if (refused.find("runs no layer from disk") != std::string::npos) {
      ++refused_disk;
      continue;
    }
    if (refused != "(no error)") {  // a module moved to its stage would pass the budget
      CHECK(refused.find("shardgraph: device map: ") == 0);
      CHECK(refused.find("in --max-memory") != std::string::npos);
      ++refused_moves;
      continue;
    }
    const auto stages = sg::plan::device_map_stages_of(map, model);
    check_stages_follow_the_map(map, model, stages);
    ++converted;
    several_stages += stages.stages.size() > 1;
  }
  CHECK(converted >= 100);
  CHECK(several_stages >= 20);
  CHECK(refused_disk >= 10);
  CHECK(refused_moves >= 1);
}

TEST_CASE("a tied head runs on the last stage with a copy of the table", "[plan][device_map]") {
  const auto model = golden_model("llama_tied_bias_headdim/config.json");
  const auto budget = sg::plan::parse_max_memory("cuda:0=1MiB,cpu=1MiB");
  const auto map = sg::plan::explicit_device_map(model,
                                                 {{"model.embed_tokens", device::cuda(0)},
                                                  {"lm_head", device::cuda(0)},
                                                  {"model.layers.0", device::cuda(0)},
                                                  {"model.layers.1", device::cpu()},
                                                  {"model.norm", device::cpu()},
                                                  {"model.rotary_emb", device::cpu()}},
                                                 budget);
  const auto stages = sg::plan::device_map_stages_of(map, model);
  check_stages_follow_the_map(map, model, stages);
  CHECK(stages.stage_layers() == std::vector<std::int64_t>{1, 1});
  REQUIRE(stages.moves.size() == 1);
  CHECK(stages.moves[0].find("lm_head (tied to model.embed_tokens) runs on cpu") == 0);
  stages.check_gpus(1);
  CHECK(error_of([&] { stages.check_gpus(0); }) ==
        "shardgraph: device map: stage 0 runs on cuda:0, but 0 GPUs are visible. give --max-memory the cpu "
        "alone "
        "(cpu=64GiB)");
  CHECK(stages.report().find("stage 0: cuda:0 (cuda backend, GPU 0): embedding + layer 0 (1)\n"
                             "stage 1: cpu (cpu backend): layer 1 (1) + head\n") == 0);
  // The copy must fit the CPU's budget: the CPU holds a layer, the norm and the rotary buffers.
  const std::int64_t on_cpu = map.bytes_per_device().back().bytes, table = map.modules.front().bytes;
  const auto tight = sg::plan::explicit_device_map(
      model, map.map, sg::plan::parse_max_memory("cuda:0=1MiB,cpu=" + std::to_string(on_cpu + table - 1)));
  CHECK(error_of([&] {
          (void)sg::plan::device_map_stages_of(tight, model);
        }).find("lm_head (" + std::to_string(table) + " bytes") != std::string::npos);
  const auto enough = sg::plan::explicit_device_map(
      model, map.map, sg::plan::parse_max_memory("cuda:0=1MiB,cpu=" + std::to_string(on_cpu + table)));
  CHECK(sg::plan::device_map_stages_of(enough, model).moves.size() == 1);
}

TEST_CASE("maps a pipeline cannot run are refused, saying why", "[plan][device_map]") {
  const auto model = golden_model("device_maps/tinyllama.json", sg::dtype::bf16);
  const auto budget = sg::plan::parse_max_memory("cuda:0=80GiB,cpu=80GiB");
  sg::plan::accelerate_map split{{"model.embed_tokens", device::cuda(0)},
                                 {"model.norm", device::cuda(0)},
                                 {"model.rotary_emb", device::cuda(0)},
                                 {"lm_head", device::cuda(0)}};
  for (int i = 0; i < 22; ++i)
    split.emplace_back("model.layers." + std::to_string(i),
                       i >= 10 && i < 16 ? device::cpu() : device::cuda(0));
  CHECK(error_of([&] {
          (void)sg::plan::device_map_stages_of(sg::plan::explicit_device_map(model, split, budget), model);
        }) ==
        "shardgraph: device map: cuda:0 holds layers 0-9 and layer 16, with other devices between: a device "
        "runs "
        "one pipeline stage. place each device's layers together, in layer order, as Accelerate does");
  CHECK(error_of([&] {
          (void)sg::plan::explicit_device_map(model, {{"model", device::cuda(0)}}, budget);
        }) == "shardgraph: device map: no device is given for 'lm_head'. place the whole model");
  const auto on_disk =
      sg::plan::explicit_device_map(model, {{"model", device::cuda(0)}, {"lm_head", device::disk()}}, budget);
  CHECK(error_of([&] {
          (void)sg::plan::device_map_stages_of(on_disk, model);
        }).find("shardgraph: device map: lm_head (131072000 bytes (125.00 MiB)) do not fit") == 0);
  // An untied lm_head after the last layer's device runs on the last stage when its budget holds it.
  sg::plan::accelerate_map head_apart{{"model", device::cuda(0)}, {"lm_head", device::cuda(1)}};
  const auto apart =
      sg::plan::device_map_stages_of(sg::plan::explicit_device_map(model, head_apart, budget), model);
  CHECK(apart.stages.size() == 1);
  CHECK(apart.moves == std::vector<std::string>{
                           "lm_head runs on cuda:0 (the map says cuda:1): the last stage holds the head"});
  const auto full =
      sg::plan::explicit_device_map(model, head_apart, sg::plan::parse_max_memory("cuda:0=2GiB,cuda:1=1GiB"));
  CHECK(error_of([&] { (void)sg::plan::device_map_stages_of(full, model); }).find("give cuda:0 at least ") !=
        std::string::npos);
}
