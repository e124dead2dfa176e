// plan::parse_max_memory and max_memory_from_limits: --max-memory as Accelerate's max_memory dict
// reads, and the budget of SHARDGRAPH_GPUS / SHARDGRAPH_GPU_MEMORY.
#include <cstdint>
#include <string>
#include <vector>

#include <shardgraph/plan/max_memory.hpp>

#include "catch.hpp"

namespace {

namespace sg = shardgraph;

using sg::testing::error_of;

}  // namespace

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
