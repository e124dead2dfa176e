#pragma once
// Where weights come from at bind: a weight_source fills this rank's slice of one parameter.
// Sources read only the slice, so each rank touches only its own part of a checkpoint.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/host_tensor.hpp"

namespace shardgraph {

// The block [offset, offset + count) of a tensor of `global` shape, per dimension.
struct tensor_slice {
  std::vector<std::int64_t> global, offset, count;
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto c : count) n *= c;
    return n;
  }
};

// Fills `out` (type, slice.count shape, row-major) with parameter `name`'s slice.
using weight_source = std::function<void(std::string_view name, const tensor_slice& slice, host_tensor& out)>;

// Visits every element of `slice` in row-major order as (global flat index, local flat index).
template <class Fn>
void for_each_in_slice(const tensor_slice& slice, Fn fn) {
  const std::size_t rank = slice.count.size();
  std::vector<std::int64_t> index(rank, 0);
  const std::int64_t total = slice.numel();
  for (std::int64_t local = 0; local < total; ++local) {
    std::int64_t global = 0;
    for (std::size_t d = 0; d < rank; ++d) global = global * slice.global[d] + slice.offset[d] + index[d];
    fn(global, local);
    for (std::size_t d = rank; d-- > 0;) {
      if (++index[d] < slice.count[d]) break;
      index[d] = 0;
    }
  }
}

// Deterministic pseudo-random weights: element (name, global index) has the same value whatever
// the layout, so sharded runs can be compared with one rank. Norm weights (names holding "ln" or
// "norm") are 1 + scale/2 * u, others scale * u, with u uniform in [-1, 1).
inline weight_source random_weights(std::uint64_t seed = 1, double scale = 0.1) {
  return [seed, scale](std::string_view name, const tensor_slice& slice, host_tensor& out) {
    std::uint64_t h = 1469598103934665603ull ^ seed;
    for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    const bool is_norm = (name.find("ln") != std::string_view::npos || name.find("norm") != std::string_view::npos) &&
                         name.ends_with(".weight");
    auto value = [&](std::int64_t i) {
      std::uint64_t z = h + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(i + 1);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      double u = static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0;
      return is_norm ? 1.0 + 0.5 * scale * u : scale * u;
    };
    for_each_in_slice(slice, [&](std::int64_t global, std::int64_t local) {
      out.set(local, value(global));
    });
  };
}

}  // namespace shardgraph
