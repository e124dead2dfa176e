// plan::infer_device_map equals HF Accelerate's infer_auto_device_map (and get_balanced_memory) on
// every golden case of tests/golden/device_maps/device_maps.json (made by make_device_maps.py):
// GPT-2 and LLaMA, tied and untied, f32/bf16/f64, budgets that spill to further GPUs, the CPU and
// the disk. Also: the printed map, and a measured budget's 10 % kept free.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <shardgraph/io/hf_config.hpp>
#include <shardgraph/plan/device_map.hpp>

#include "catch.hpp"

namespace {

namespace sg = shardgraph;
using sg::plan::device;

const std::string golden_dir = SHARDGRAPH_GOLDEN_DIR;

sg::dtype dtype_named(const std::string& name) {
  if (name == "f32") return sg::dtype::f32;
  if (name == "bf16") return sg::dtype::bf16;
  if (name == "f64") return sg::dtype::f64;
  FAIL("unknown dtype " << name);
  return sg::dtype::f32;
}

sg::plan::hf_module_tree golden_model(const std::string& config, sg::dtype type = sg::dtype::f32) {
  return sg::plan::hf_module_tree_of(golden_dir + "/" + config, type);
}

std::map<std::string, std::string> as_text(const sg::plan::accelerate_map& map) {
  std::map<std::string, std::string> out;
  for (const auto& [name, on] : map) out[name] = on.text();
  return out;
}

}  // namespace

TEST_CASE("device maps equal Accelerate's on every golden case", "[plan][device_map][golden]") {
  const sg::io::json::value golden = sg::io::read_json_file(golden_dir + "/device_maps/device_maps.json");
  const auto& cases = golden.at("cases").as_array();
  REQUIRE(cases.size() >= 400);
  std::map<std::string, sg::plan::hf_module_tree> models;
  int spilled = 0, on_disk = 0, balanced_differs = 0;
  std::map<std::string, std::string> previous_sequential;
  for (const auto& c : cases) {
    const std::string model = c.at("model").as_string(), dtype = c.at("dtype").as_string();
    const std::string key = model + "/" + dtype;
    if (!models.contains(key))
      models.emplace(key, golden_model(c.at("config").as_string(), dtype_named(dtype)));
    const sg::plan::hf_module_tree& tree = models.at(key);
    INFO(model << " " << dtype << " " << c.at("strategy").as_string() << " "
               << c.at("max_memory").as_string());
    CHECK(sg::plan::compute_module_sizes(tree.tree).total() == c.at("model_bytes").as_int());
    const auto strategy = sg::plan::parse_placement_strategy(c.at("strategy").as_string());
    const auto map = sg::plan::infer_device_map(
        tree, sg::plan::parse_max_memory(c.at("max_memory").as_string()), strategy);
    std::map<std::string, std::string> expected;
    for (const auto& [name, on] : c.at("map").as_object()) expected[name] = on.as_string();
    CHECK(as_text(map.map) == expected);
    spilled += expected.size() > 1;
    on_disk +=
        std::any_of(expected.begin(), expected.end(), [](const auto& kv) { return kv.second == "disk"; });
    if (strategy == sg::plan::placement_strategy::sequential)
      previous_sequential = expected;
    else
      balanced_differs += previous_sequential != expected;
  }
  // The cases reach every branch: maps over several devices, the disk, balanced differing.
  CHECK(spilled >= 100);
  CHECK(on_disk >= 20);
  CHECK(balanced_differs >= 20);
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
