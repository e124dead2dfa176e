#pragma once
// Comparing a model's numbers with golden data (tests/golden): relative differences, the names a
// golden file's metadata lists, a tensor's values as doubles, and a layout's outputs and gradients
// against HF's and against one rank's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <shardgraph/core/host_tensor.hpp>
#include <shardgraph/io/safetensors.hpp>

#include "catch.hpp"

namespace test_support {

// max |got - expected| / max |expected| over every element.
inline double relative_difference(const std::vector<double>& got, const std::vector<double>& expected) {
  REQUIRE(got.size() == expected.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return diff / scale;
}

// max |v| over every element.
inline double largest(const std::vector<double>& values) {
  double m = 0;
  for (double v : values) m = std::max(m, std::abs(v));
  return m;
}

// Every value of t; with columns > 0, the first `columns` of every row (t's last dimension), as a
// padded vocabulary's logits are cut to the file's.
inline std::vector<double> values_of(const shardgraph::host_tensor& t, std::int64_t columns = 0) {
  const std::int64_t width = columns > 0 ? t.shape().back() : 1;
  std::vector<double> v;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (columns == 0 || i % width < columns) v.push_back(t.at(i));
  return v;
}

// The names in a comma-separated metadata entry (absent: none).
inline std::set<std::string> listed(const shardgraph::io::safetensors_file& f, const std::string& key) {
  std::set<std::string> names;
  const auto at = f.metadata().find(key);
  if (at == f.metadata().end()) return names;
  std::stringstream s(at->second);
  for (std::string name; std::getline(s, name, ',');)
    if (!name.empty()) names.insert(name);
  return names;
}

// Values by name: a layout's outputs ("logits") or its gradients by the golden file's names
// ("grad.vit.layers.0.mlp.fc1.weight").
using values_by_name = std::map<std::string, std::vector<double>>;

// An attention's key projection bias adds one number to all of a query's scores, which the
// softmax ignores: its gradient is zero but for rounding, and is checked to be small rather than
// compared.
inline bool zero_in_exact_arithmetic(const std::string& gradient) {
  return gradient.ends_with(".k_proj.bias");
}

// outputs and gradients against `golden`'s tensors of the same names, to `tolerance` relative;
// every "grad." tensor of the file computed. HF's gradients that are zero in exact arithmetic are
// float32 noise below 1e-7 (its softmax), ours below 1e-12.
inline void check_against_golden(const values_by_name& outputs, const values_by_name& gradients,
                                 const shardgraph::io::safetensors_file& golden, double tolerance) {
  for (const auto& [name, values] : outputs) {
    CAPTURE(name);
    CHECK(relative_difference(values, golden.read_as<double>(name)) < tolerance);
  }
  std::set<std::string> golden_gradients, computed;
  for (const shardgraph::io::tensor_info& t : golden.tensors())
    if (t.name.starts_with("grad.")) golden_gradients.insert(t.name);
  for (const auto& [name, values] : gradients) {
    CAPTURE(name);
    computed.insert(name);
    if (zero_in_exact_arithmetic(name)) {
      CHECK(largest(values) < 1e-12);
      CHECK(largest(golden.read_as<double>(name)) < 1e-7);
    } else {
      CHECK(relative_difference(values, golden.read_as<double>(name)) < tolerance);
    }
  }
  CHECK(computed == golden_gradients);
}

// got equals expected, name by name, to float64 rounding (1e-9 relative): a sharded layout against
// one rank.
inline void check_same(const values_by_name& got, const values_by_name& expected) {
  REQUIRE(got.size() == expected.size());
  for (const auto& [name, values] : expected) {
    CAPTURE(name);
    REQUIRE(got.contains(name));
    if (zero_in_exact_arithmetic(name))
      CHECK(largest(got.at(name)) < 1e-12);
    else
      CHECK(relative_difference(got.at(name), values) < 1e-9);
  }
}

}  // namespace test_support
