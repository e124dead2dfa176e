// plan::device_map_stages_of: a device map as pipeline stages (one per run of layers on one device,
// embedding first, head last), on every golden map Accelerate made and on maps written by hand that
// are not contiguous, leave a module on disk or move one past its budget. Also --max-memory parsing
// and the printed map.
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

std::string error_of(const auto& call) {
  try {
    call();
  } catch (const sg::error& e) {
    return e.what();
  }
  return "no error";
}

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
    if (refused != "no error") {  // a module moved to its stage would pass the budget
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

TEST_CASE("--max-memory reads devices as Accelerate's max_memory does", "[plan][device_map]") {
  const auto m = sg::plan::parse_max_memory("cpu=3GB,cuda:1=1GiB,0=2MiB");
  REQUIRE(m.budgets.size() == 3);
  CHECK(m.text() == "cuda:0=2097152,cuda:1=1073741824,cpu=3000000000");  // Accelerate's order: GPUs, then cpu
  CHECK(sg::plan::parse_max_memory("cuda=1GiB").text() == "cuda:0=1073741824");
  CHECK(sg::plan::parse_max_memory(" cuda:0 = 1GiB, cpu=2 GiB ").text() ==
        "cuda:0=1073741824,cpu=2147483648");
  const sg::plan::device_totals totals{.gpu_bytes = {1000, 2000}, .cpu_bytes = 5000};
  CHECK(sg::plan::parse_max_memory("cuda:1=50%,cpu=10%", totals).text() == "cuda:1=1000,cpu=500");
  const auto refused = [](const char* text) {
    return error_of([&] { (void)sg::plan::parse_max_memory(text); });
  };
  CHECK(refused("cuda:0=1GiB,cuda:0=2GiB") ==
        "shardgraph: --max-memory: cuda:0 is given twice. give each device one budget");
  CHECK(refused("gpu0=1GiB").find("shardgraph: --max-memory: 'gpu0' is not a device. name cuda:N") == 0);
  CHECK(refused("cuda:0").find("shardgraph: --max-memory: 'cuda:0' has no '='") == 0);
  CHECK(refused("disk=1GiB").find("'disk' is not a device shardgraph runs layers on") != std::string::npos);
  CHECK(refused("cuda:0=lots").find("shardgraph: --max-memory: cuda:0: 'lots' is not a memory size") == 0);
  CHECK(refused("cuda:2=80%").find("cuda:2 is given as a share, but its total memory is not known here") !=
        std::string::npos);
  CHECK(refused("").find("no device is given") != std::string::npos);
  const auto limits = sg::launch::parse_gpu_memory("40GiB", {.gpus = 2});
  const std::vector<std::int64_t> gpus(3, std::int64_t{80} << 30);
  CHECK(sg::plan::max_memory_from_limits(limits, gpus, std::int64_t{64} << 30).text() ==
        "cuda:0=42949672960,cuda:1=42949672960,cpu=68719476736");
  CHECK(error_of([&] { (void)sg::plan::max_memory_from_limits({.gpus = 4}, gpus, 0); }) ==
        "shardgraph: SHARDGRAPH_GPUS: 4 GPUs asked for, 3 visible. ask for at most the visible GPUs");
}

TEST_CASE("a measured budget on one GPU keeps 10 % free under balanced, as Accelerate's default",
          "[plan][device_map]") {
  const auto model = golden_model("device_maps/gpt2_124m.json");
  const std::vector<std::int64_t> one_gpu{std::int64_t{1} << 30};
  const auto measured = sg::plan::max_memory_from_limits({}, one_gpu, std::int64_t{8} << 30);
  CHECK(measured.measured);
  const auto balanced = sg::plan::infer_device_map(model, measured, sg::plan::placement_strategy::balanced);
  CHECK(balanced.filled.of(device::cuda(0)) ==
        static_cast<std::int64_t>(0.9 * static_cast<double>(one_gpu[0])));
  CHECK(balanced.filled.of(device::cpu()) == measured.of(device::cpu()));
  const auto sequential =
      sg::plan::infer_device_map(model, measured, sg::plan::placement_strategy::sequential);
  CHECK(sequential.filled.of(device::cuda(0)) == one_gpu[0]);
  const auto capped = sg::plan::max_memory_from_limits(sg::launch::parse_gpu_memory("1GiB"), one_gpu, 0);
  CHECK_FALSE(capped.measured);
  CHECK(sg::plan::infer_device_map(model, capped, sg::plan::placement_strategy::balanced)
            .filled.of(device::cuda(0)) == one_gpu[0]);
}

TEST_CASE("the printed map has one line per layer and the bytes per device", "[plan][device_map]") {
  const auto model = golden_model("device_maps/gpt2_124m.json");
  const auto map = sg::plan::infer_device_map(model, sg::plan::parse_max_memory("cuda:0=300MiB,cpu=2GiB"),
                                              sg::plan::placement_strategy::sequential);
  const std::string text = map.report();
  INFO(text);
  CHECK(text.find("device map (sequential, f32), budget cuda:0=314572800,cpu=2147483648\n") == 0);
  for (const auto& m : map.modules) {
    const auto line = text.find("  " + m.name + " ");
    REQUIRE(line != std::string::npos);
    CHECK(text.find(m.on.text(), line) < text.find('\n', line));
  }
  CHECK(text.find("lm_head") != std::string::npos);
  CHECK(text.find("tied to transformer.wte") != std::string::npos);
  std::int64_t total = 0;
  for (const auto& b : map.bytes_per_device()) {
    const auto count =
        std::count_if(map.modules.begin(), map.modules.end(), [&](const auto& m) { return m.on == b.on; });
    CHECK(text.find(b.on.text() + ": " + std::to_string(count) + " modules, " + std::to_string(b.bytes) +
                    " bytes") != std::string::npos);
    total += b.bytes;
  }
  CHECK(total == sg::plan::compute_module_sizes(model.tree).total());
  CHECK(map.bytes_per_device().size() == 2);  // 300 MiB holds the embedding and some layers, not all
}
