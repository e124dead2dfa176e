#pragma once
// split_micro_batches: one step's batch cut into `parts` micro-batches of consecutive rows, for
// gradient accumulation and pipeline schedules (trainer::step takes the parts).
//
//   auto parts = split_micro_batches(loader.next_global_batch(), 4);   // (batch, seq) -> 4 x (batch / 4,
//   seq) trainer.step(parts);
//
// Every tensor of the batch is cut along its first dimension, which must divide by `parts`.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"

namespace shardgraph::data {

inline std::vector<std::map<std::string, host_tensor>> split_micro_batches(
    const std::map<std::string, host_tensor>& batch, int parts) {
  if (parts < 1)
    fail("split_micro_batches", std::to_string(parts) + " micro-batches", "give at least one micro-batch");
  std::vector<std::map<std::string, host_tensor>> result(static_cast<std::size_t>(parts));
  for (const auto& [name, whole] : batch) {
    if (whole.shape().empty() || whole.shape()[0] % parts != 0)
      fail("split_micro_batches",
           "'" + name + "' has " +
               (whole.shape().empty() ? std::string("no rows") : std::to_string(whole.shape()[0]) + " rows") +
               ", which do not split into " + std::to_string(parts) + " micro-batches",
           "choose a micro-batch count that divides the batch");
    std::vector<std::int64_t> shape = whole.shape();
    shape[0] /= parts;
    const std::size_t bytes = whole.bytes().size() / static_cast<std::size_t>(parts);
    for (int k = 0; k < parts; ++k) {
      host_tensor part(whole.type(), shape);
      std::memcpy(part.bytes().data(), whole.bytes().data() + static_cast<std::size_t>(k) * bytes, bytes);
      result[static_cast<std::size_t>(k)].emplace(name, std::move(part));
    }
  }
  return result;
}

}  // namespace shardgraph::data
