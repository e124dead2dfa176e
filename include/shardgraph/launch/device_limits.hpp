#pragma once
// How many GPUs a process may use and how much memory on each, from a flag or the environment:
//
//   SHARDGRAPH_GPUS=2              use GPUs 0 and 1 of the visible ones (unset: all)
//   SHARDGRAPH_GPU_MEMORY=40GiB    cap each GPU's arena at 40 GiB (also 512MiB, 40GB, 40G, 123456)
//   SHARDGRAPH_GPU_MEMORY=80%      cap it at 80 % of the GPU's memory
//
//   const auto limits = shardgraph::launch::device_limits_from(shardgraph::launch::process_environment);
//   const std::int64_t cap = limits.memory_cap(total_bytes_of_this_gpu);   // 0: no cap
//
// tools/shardgraph-run --gpus and --gpu-memory set the same variables. A malformed value is an
// error naming the variable, never a silent default.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"
#include "shardgraph/launch/placement.hpp"

namespace shardgraph::launch {

struct device_limits {
  int gpus = 0;                   // 0: every visible GPU
  std::int64_t memory_bytes = 0;  // per GPU; 0: no byte cap
  double memory_fraction = 0;     // per GPU, of its total; 0: no share cap

  std::int64_t memory_cap(std::int64_t gpu_total_bytes) const {
    if (memory_bytes > 0) return memory_bytes;
    if (memory_fraction > 0)
      return static_cast<std::int64_t>(std::floor(memory_fraction * static_cast<double>(gpu_total_bytes)));
    return 0;
  }
};

// "40GiB", "512MiB", "40GB", "40G", "1.5TiB", "123456" (bytes) or "80%". Binary and decimal units
// are told apart as usual: KiB = 1024, KB = 1000; a bare K/M/G/T is binary, as in nvidia-smi.
inline device_limits parse_gpu_memory(std::string_view text, device_limits limits = {}) {
  const std::string where = "launch: SHARDGRAPH_GPU_MEMORY";
  const auto bad = [&] {
    fail(where, "'" + std::string(text) + "' is not a memory size",
         "give bytes with a unit (40GiB, 512MiB, 40GB) or a share of the GPU (80%)");
  };
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) bad();
  double value = 0;
  try {
    std::size_t used = 0;
    value = std::stod(std::string(text.substr(0, i)), &used);
    if (used != i) bad();
  } catch (const std::exception&) {
    bad();
  }
  std::string unit(text.substr(i));
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  if (unit == "%") {
    if (!(value > 0 && value <= 100))
      fail(where, "'" + std::string(text) + "' is not a share in (0, 100] %", "give a share such as 80%");
    limits.memory_fraction = value / 100.0;
    limits.memory_bytes = 0;
    return limits;
  }
  double scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else {
    const char prefix = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    const std::string rest = unit.substr(1);
    int power = prefix == 'K' ? 1 : prefix == 'M' ? 2 : prefix == 'G' ? 3 : prefix == 'T' ? 4 : 0;
    if (power == 0) bad();
    double base = 1024;
    if (rest == "B")
      base = 1000;
    else if (rest != "" && rest != "iB" && rest != "i")
      bad();
    scale = std::pow(base, power);
  }
  if (!(value > 0))
    fail(where, "'" + std::string(text) + "' is not a positive size", "give a size above zero");
  limits.memory_bytes = static_cast<std::int64_t>(value * scale);
  limits.memory_fraction = 0;
  return limits;
}

inline device_limits device_limits_from(const environment& env) {
  device_limits limits;
  if (const auto g = env("SHARDGRAPH_GPUS")) {
    limits.gpus = detail::integer_variable(env, "SHARDGRAPH_GPUS", 0);
    if (limits.gpus < 1)
      fail("launch", "SHARDGRAPH_GPUS is " + *g + ": a process needs at least one GPU",
           "set it to 1 or more, or unset it to use every visible GPU");
  }
  if (const auto m = env("SHARDGRAPH_GPU_MEMORY")) limits = parse_gpu_memory(*m, limits);
  return limits;
}

}  // namespace shardgraph::launch
