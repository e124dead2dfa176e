#pragma once
// whole_parameters: the training examples' layout check. Each rank holds slices of the parameters;
// gathered into whole tensors (by name, row-major, as f64) they compare across layouts: a layout
// trains right when its weights after a few steps equal one rank's to f64 rounding.
//
//   std::map<std::string, std::vector<double>> whole;
//   add_slices(whole, rank.parameters());          // on every rank, under a lock
//   ...
//   double d = max_relative_difference(on_mesh, on_one_rank);   // < 1e-9: the same training
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/weight_source.hpp"

namespace shardgraph::examples {

using whole_tensors = std::map<std::string, std::vector<double>>;

// Writes each part's values into its place in whole[name], sized to the part's global shape.
// Parts: a map from names to a rank's tensor parts (rank_program::parameters()): .slice (global
// shape, offsets, local shape) and .values (.at(local index)). Ranks holding the same elements
// write the same values.
template <class Parts>
void add_slices(whole_tensors& whole, const Parts& parts) {
  for (const auto& [name, part] : parts) {
    std::vector<double>& dst = whole[name];
    std::int64_t n = 1;
    for (const std::int64_t d : part.slice.global) n *= d;
    dst.resize(static_cast<std::size_t>(n));
    for_each_in_slice(part.slice, [&](std::int64_t global, std::int64_t local) {
      dst[static_cast<std::size_t>(global)] = part.values.at(local);
    });
  }
}

// The largest max|have - want| / max|want| over the tensors of `want`; each must be in `have`.
inline double max_relative_difference(const whole_tensors& have, const whole_tensors& want) {
  double worst = 0;
  for (const auto& [name, expected] : want) {
    const auto found = have.find(name);
    if (found == have.end() || found->second.size() != expected.size())
      fail("max_relative_difference", "the parameter " + name + " is missing or of another size",
           "Compare the weights of two runs of the same model");
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      diff = std::max(diff, std::abs(found->second[i] - expected[i]));
      scale = std::max(scale, std::abs(expected[i]));
    }
    worst = std::max(worst, scale > 0 ? diff / scale : diff);
  }
  return worst;
}

}  // namespace shardgraph::examples
