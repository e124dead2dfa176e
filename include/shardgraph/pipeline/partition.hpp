#pragma once
// partition_layers: which contiguous block layers each pipeline (virtual) stage holds.
//
// The balanced rule, with `layer_counts` empty. Stage j costs its layer count, plus `embedding_cost`
// on stage 0 and `head_cost` (final norm, logits and loss) on the last stage, both counted in layers.
//   1. The largest stage cost is as small as it can be, with every stage holding at least one layer.
//   2. Among those splits, the layer counts are as even as they can be: the largest as small as it can
//      be, then the smallest as large (weights and activations, hence memory, follow layers).
//   3. Among those, earlier stages hold fewer layers (the lexicographically smallest counts): under
//      1F1B the first stages keep the most micro-batches in flight, so they need the memory most.
//   E.g. 10 layers on 4 stages: 2,3,3,2 (costs 3,3,3,3); with both costs 0: 2,2,3,3.
//
//   partition_layers(12, 4).report()         partition_layers(22, 4).report()
//     stage 0: embedding + layers 0-2 (3)      stage 0: embedding + layers 0-4 (5)
//     stage 1: layers 3-5 (3)                  stage 1: layers 5-10 (6)
//     stage 2: layers 6-8 (3)                  stage 2: layers 11-16 (6)
//     stage 3: layers 9-11 (3) + head          stage 3: layers 17-21 (5) + head
//     12 layers over 4 stages, 3 each          22 layers over 4 stages (uneven: 5 to 6 each)
//
// With `layer_counts` given, the split is exactly that, after checking it.
// With interleaved schedules the stages are virtual stages: virtual stage j runs on rank j % ranks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"

namespace shardgraph::pipeline {

struct stage_partition {
  // Virtual stage j (0 .. stages-1) holds block layers [first_layer[j], first_layer[j+1]);
  // first_layer.size() == stages + 1, first_layer[0] == 0, first_layer.back() == the layer count.
  std::vector<std::int64_t> first_layer;

  int stages() const { return first_layer.empty() ? 0 : static_cast<int>(first_layer.size()) - 1; }
  std::int64_t layers() const { return first_layer.empty() ? 0 : first_layer.back(); }
  std::int64_t layers_of(int stage) const {
    return first_layer[static_cast<std::size_t>(stage) + 1] - first_layer[static_cast<std::size_t>(stage)];
  }
  // The layer counts, "3,3,3,3": the --stage-layers spelling of this split.
  std::string counts_text() const {
    std::string t;
    for (int j = 0; j < stages(); ++j) t += (j ? "," : "") + std::to_string(layers_of(j));
    return t;
  }

  // One line per stage, then a summary line (see the top of this file).
  std::string report() const {
    std::string t;
    std::int64_t fewest = 0, most = 0;
    for (int j = 0; j < stages(); ++j) {
      const std::int64_t first = first_layer[static_cast<std::size_t>(j)], n = layers_of(j);
      fewest = j == 0 ? n : std::min(fewest, n);
      most = std::max(most, n);
      t += "stage " + std::to_string(j) + ": ";
      if (j == 0) t += "embedding + ";
      t += n == 1 ? "layer " + std::to_string(first)
                  : "layers " + std::to_string(first) + "-" + std::to_string(first + n - 1);
      t += " (" + std::to_string(n) + ")";
      if (j == stages() - 1) t += " + head";
      t += '\n';
    }
    t += std::to_string(layers()) + " layers over " + std::to_string(stages()) +
         (stages() == 1 ? " stage" : " stages");
    if (fewest == most)
      t += ", " + std::to_string(most) + " each\n";
    else
      t += " (uneven: " + std::to_string(fewest) + " to " + std::to_string(most) + " each)\n";
    return t;
  }
};

namespace detail {

inline std::string partition_where(std::int64_t layers, int stages) {
  return "pipeline::partition_layers(" + std::to_string(layers) + " layers, " + std::to_string(stages) +
         (stages == 1 ? " stage)" : " stages)");
}

inline stage_partition from_counts(std::span<const std::int64_t> counts) {
  stage_partition p;
  p.first_layer.push_back(0);
  for (std::int64_t n : counts) p.first_layer.push_back(p.first_layer.back() + n);
  return p;
}

// The balanced split (rules 1-3 at the top of this file); 1 <= stages <= layers.
inline stage_partition balanced_partition(std::int64_t layers, int stages, double embedding_cost,
                                          double head_cost) {
  const auto s = static_cast<std::size_t>(stages);
  std::vector<double> extra(s, 0.0);
  extra.front() += embedding_cost;
  extra.back() += head_cost;
  // Most layers stage j may hold when no stage may cost more than `cost`. The tolerance absorbs the
  // rounding of fractional costs such as 0.1.
  auto most_layers = [&](double cost, std::size_t j) {
    const double room = cost - extra[j] + 1e-9;
    return room < 1.0 ? std::int64_t{0} : static_cast<std::int64_t>(std::floor(room));
  };
  auto fits = [&](double cost) {
    std::int64_t total = 0;
    for (std::size_t j = 0; j < s; ++j) {
      const std::int64_t u = most_layers(cost, j);
      if (u < 1) return false;
      total += u;
    }
    return total >= layers;
  };
  // Rule 1: the smallest largest cost is n + extra[j] for some stage j and layer count n.
  std::vector<double> extras = extra, candidates;
  std::sort(extras.begin(), extras.end());
  extras.erase(std::unique(extras.begin(), extras.end()), extras.end());
  for (double e : extras)
    for (std::int64_t n = 1; n <= layers - stages + 1; ++n) candidates.push_back(static_cast<double>(n) + e);
  std::sort(candidates.begin(), candidates.end());
  const double cost =
      *std::partition_point(candidates.begin(), candidates.end(), [&](double c) { return !fits(c); });
  std::vector<std::int64_t> upper(s);
  for (std::size_t j = 0; j < s; ++j) upper[j] = most_layers(cost, j);
  // Rule 2: the smallest cap on layer counts that still holds every layer, then the largest floor.
  const auto total_of = [&](const std::vector<std::int64_t>& bound, std::size_t from) {
    std::int64_t total = 0;
    for (std::size_t j = from; j < s; ++j) total += bound[j];
    return total;
  };
  const auto capped = [&](std::int64_t cap) {
    std::vector<std::int64_t> b(upper);
    for (auto& u : b) u = std::min(u, cap);
    return b;
  };
  std::int64_t cap = 1;
  while (total_of(capped(cap), 0) < layers) ++cap;
  upper = capped(cap);
  std::vector<std::int64_t> lower(s, 1);
  for (std::int64_t floor = 2; floor <= cap; ++floor) {
    std::vector<std::int64_t> raised(upper);
    for (auto& u : raised) u = std::min(u, floor);
    if (total_of(raised, 0) > layers) break;
    lower = raised;
  }
  // Rule 3: each stage in turn takes the fewest layers that the later stages leave it.
  std::vector<std::int64_t> counts(s);
  std::int64_t left = layers;
  for (std::size_t j = 0; j < s; ++j) {
    counts[j] = std::max(lower[j], left - total_of(upper, j + 1));
    left -= counts[j];
  }
  return from_counts(counts);
}

}  // namespace detail

// Splits `layers` block layers over `stages` contiguous virtual stages: balanced (the rule at the top of
// this file) when `layer_counts` is empty, else exactly `layer_counts` (one count per stage, each at
// least 1, summing to `layers`). Throws shardgraph::error when the split cannot be made.
inline stage_partition partition_layers(std::int64_t layers, int stages,
                                        std::span<const std::int64_t> layer_counts = {},
                                        double embedding_cost = 1.0, double head_cost = 1.0) {
  const std::string where = detail::partition_where(layers, stages);
  if (stages < 1)
    fail(where, "a pipeline needs at least one stage, got " + std::to_string(stages),
         "use at least 1 pipeline stage");
  if (layers < 1) fail(where, "the model has no block layers to split", "give the model at least one layer");
  if (stages > layers)
    fail(where,
         std::to_string(stages) + " stages for " + std::to_string(layers) +
             " layers: every stage needs at least one layer",
         "use at most " + std::to_string(layers) + " pipeline stages, or more layers");
  if (!(embedding_cost >= 0.0) || !(head_cost >= 0.0) || !std::isfinite(embedding_cost) ||
      !std::isfinite(head_cost))
    fail(where,
         "the embedding and head costs must be finite and not negative, got " +
             std::to_string(embedding_cost) + " and " + std::to_string(head_cost),
         "count each in layers, e.g. 1.0 (the default)");
  if (layer_counts.empty()) return detail::balanced_partition(layers, stages, embedding_cost, head_cost);

  const std::string balanced =
      detail::balanced_partition(layers, stages, embedding_cost, head_cost).counts_text();
  const std::string given = detail::from_counts(layer_counts).counts_text();
  if (static_cast<std::int64_t>(layer_counts.size()) != stages)
    fail(where,
         "the layer counts " + given + " name " + std::to_string(layer_counts.size()) + " stages, not " +
             std::to_string(stages),
         "give one count per (virtual) stage, e.g. the balanced " + balanced);
  std::int64_t sum = 0;
  for (std::size_t j = 0; j < layer_counts.size(); ++j) {
    if (layer_counts[j] < 1)
      fail(where, "stage " + std::to_string(j) + " gets " + std::to_string(layer_counts[j]) + " layers",
           "give every stage at least one layer, e.g. the balanced " + balanced);
    sum += layer_counts[j];
  }
  if (sum != layers)
    fail(where,
         "the layer counts " + given + " sum to " + std::to_string(sum) + ", but the model has " +
             std::to_string(layers) + " layers",
         "make them sum to " + std::to_string(layers) + ", e.g. the balanced " + balanced);
  return detail::from_counts(layer_counts);
}

}  // namespace shardgraph::pipeline
