#pragma once
// max_memory: how many bytes of weights each device may hold, as `--max-memory` writes it and as
// HF Accelerate's `max_memory` dict means it:
//
//   parse_max_memory("cuda:0=20GiB,cuda:1=40GiB,cpu=64GiB")
//   parse_max_memory("0=20GiB,1=40GiB,cpu=64GiB")          Accelerate's spelling: a bare index is a GPU
//   parse_max_memory("cuda:0=80%,cpu=50%", {.gpu_bytes = {totals...}, .cpu_bytes = ram})   shares
//   max_memory_from_limits(launch::device_limits_from(env), gpu_total_bytes, cpu_bytes)
//                                                          SHARDGRAPH_GPUS / SHARDGRAPH_GPU_MEMORY
//
// Sizes as core/memory_size.hpp reads them ("20GiB" = 20 * 2^30, "20GB" = 20 * 10^9, bytes). The
// budgets come out in Accelerate's device order, whatever the order written: GPUs by index, then
// the CPU; the order in which plan/device_map.hpp fills them. "disk" is refused: shardgraph runs no
// layer from disk.
#include <algorithm>
#include <compare>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/memory_size.hpp"
#include "shardgraph/launch/device_limits.hpp"

namespace shardgraph::plan {

// A device of a device map. Ordered as Accelerate fills them: cuda:0 < cuda:1 < ... < cpu < disk.
struct device {
  enum class kind : std::uint8_t { cuda, cpu, disk };
  kind type = kind::cpu;
  int index = 0;  // the GPU's index for cuda; 0 otherwise

  static device cuda(int i) { return {kind::cuda, i}; }
  static device cpu() { return {kind::cpu, 0}; }
  static device disk() { return {kind::disk, 0}; }
  bool is_cuda() const { return type == kind::cuda; }
  // "cuda:0", "cpu", "disk"
  std::string text() const {
    return type == kind::cuda ? "cuda:" + std::to_string(index) : type == kind::cpu ? "cpu" : "disk";
  }
  // Written out: nvcc leaves the == that a defaulted <=> implies undefined.
  friend bool operator==(const device&, const device&) = default;
  friend auto operator<=>(const device&, const device&) = default;
};

struct device_budget {
  device on;
  std::int64_t bytes = 0;
};

struct max_memory {
  std::vector<device_budget> budgets;  // GPUs by index, then the CPU; each device once
  // The budgets are what the devices have free, not the user's (Accelerate's max_memory=None): a
  // balanced placement on one GPU then keeps 10 % of it free, as get_balanced_memory does.
  bool measured = false;

  // The budget of `d`; 0 when d has none.
  std::int64_t of(device d) const {
    for (const device_budget& b : budgets)
      if (b.on == d) return b.bytes;
    return 0;
  }
  bool has(device d) const {
    return std::any_of(budgets.begin(), budgets.end(), [&](const device_budget& b) { return b.on == d; });
  }
  // "cuda:0=21474836480,cpu=68719476736": the --max-memory spelling, in bytes.
  std::string text() const {
    std::string t;
    for (const device_budget& b : budgets)
      t += (t.empty() ? "" : ",") + b.on.text() + "=" + std::to_string(b.bytes);
    return t;
  }
};

// What a share ("80%") is taken of: each GPU's total memory (by index) and the host's.
struct device_totals {
  std::vector<std::int64_t> gpu_bytes;
  std::int64_t cpu_bytes = 0;
};

namespace detail {

inline constexpr std::string_view max_memory_where = "--max-memory";
inline constexpr std::string_view max_memory_example = "cuda:0=20GiB,cuda:1=40GiB,cpu=64GiB";

// "cuda:0", "cuda" (cuda:0), "0" (Accelerate's GPU 0), "cpu".
inline device parse_device(std::string_view name) {
  const auto bad = [&](std::string_view why) {
    fail(max_memory_where, "'" + std::string(name) + "' " + std::string(why),
         "name cuda:N (or N, as Accelerate does) or cpu, e.g. " + std::string(max_memory_example));
  };
  if (name == "cpu") return device::cpu();
  if (name == "disk")
    fail(max_memory_where, "'disk' is not a device shardgraph runs layers on",
         "give the CPU enough memory for what the GPUs do not hold (cpu=64GiB)");
  std::string_view digits = name;
  if (name == "cuda") return device::cuda(0);
  if (name.starts_with("cuda:")) digits = name.substr(5);
  if (digits.empty() || digits.size() > 6 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    bad("is not a device");
  return device::cuda(std::stoi(std::string(digits)));
}

inline std::int64_t resolve_amount(const memory_amount& amount, device d, const device_totals& totals) {
  if (amount.bytes > 0) return amount.bytes;
  std::int64_t whole = 0;
  if (d.is_cuda() && d.index < static_cast<int>(totals.gpu_bytes.size()))
    whole = totals.gpu_bytes[static_cast<std::size_t>(d.index)];
  else if (!d.is_cuda())
    whole = totals.cpu_bytes;
  if (whole <= 0)
    fail(max_memory_where, d.text() + " is given as a share, but its total memory is not known here",
         "give it in bytes (" + d.text() + "=20GiB)");
  return std::max<std::int64_t>(1, amount.of(whole));
}

inline std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

inline void sort_budgets(max_memory& m) {
  std::sort(m.budgets.begin(), m.budgets.end(),
            [](const device_budget& a, const device_budget& b) { return a.on < b.on; });
}

}  // namespace detail

// Parses "device=size,device=size,..." (spaces around the parts allowed): each device once, each
// size positive. A share ("80%") is
// taken of `totals` and refused where the total is not given.
inline max_memory parse_max_memory(std::string_view text, const device_totals& totals = {}) {
  using namespace detail;
  max_memory m;
  if (text.empty())
    fail(max_memory_where, "no device is given",
         "name each device and its budget, e.g. " + std::string(max_memory_example));
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trimmed(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos)
      fail(max_memory_where, "'" + std::string(item) + "' has no '='",
           "write device=size, e.g. " + std::string(max_memory_example));
    const device d = parse_device(trimmed(item.substr(0, equals)));
    if (m.has(d)) fail(max_memory_where, d.text() + " is given twice", "give each device one budget");
    const std::string where = std::string(max_memory_where) + ": " + d.text();
    const memory_amount amount =
        parse_memory_amount(trimmed(item.substr(equals + 1)), where, "a share of its memory (80%)");
    m.budgets.push_back({d, resolve_amount(amount, d, totals)});
  }
  sort_budgets(m);
  return m;
}

// The budget SHARDGRAPH_GPUS and SHARDGRAPH_GPU_MEMORY (launch/device_limits.hpp) imply, where no
// --max-memory is given: the first `limits.gpus` GPUs (all of `gpu_total_bytes` when 0), each
// capped as limits say (else all of it), then the CPU with `cpu_bytes` (none when 0). Accelerate
// takes each GPU's free memory and the host's available memory: pass those. Without a cap the
// budget is `measured`.
inline max_memory max_memory_from_limits(const launch::device_limits& limits,
                                         std::span<const std::int64_t> gpu_total_bytes,
                                         std::int64_t cpu_bytes) {
  const std::size_t gpus = limits.gpus > 0 ? static_cast<std::size_t>(limits.gpus) : gpu_total_bytes.size();
  if (gpus > gpu_total_bytes.size())
    fail("SHARDGRAPH_GPUS",
         std::to_string(gpus) + " GPUs asked for, " + std::to_string(gpu_total_bytes.size()) + " visible",
         "ask for at most the visible GPUs");
  max_memory m{.budgets = {}, .measured = limits.memory_bytes == 0 && limits.memory_fraction == 0};
  for (std::size_t i = 0; i < gpus; ++i) {
    const std::int64_t cap = limits.memory_cap(gpu_total_bytes[i]);
    m.budgets.push_back({device::cuda(static_cast<int>(i)), cap > 0 ? cap : gpu_total_bytes[i]});
  }
  if (cpu_bytes > 0) m.budgets.push_back({device::cpu(), cpu_bytes});
  return m;
}

}  // namespace shardgraph::plan
