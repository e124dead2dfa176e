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
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/memory_size.hpp"
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

// "40GiB", "512MiB", "40GB", "40G", "1.5TiB", "123456" (bytes) or "80%" (core/memory_size.hpp).
inline device_limits parse_gpu_memory(std::string_view text, device_limits limits = {}) {
  const memory_amount amount =
      parse_memory_amount(text, "launch: SHARDGRAPH_GPU_MEMORY", "a share of the GPU (80%)");
  limits.memory_bytes = amount.bytes;
  limits.memory_fraction = amount.fraction;
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
