#pragma once
// Next-token accuracy on chosen positions: held-out accuracy on the positions a task scores, e.g.
// the answer digits of the examples' addition task (examples/common/addition_task.hpp).
//
//   auto outputs = rank.forward(batch);
//   auto predicted = argmax_last_dim(outputs["logits"]);                            // (batch * seq)
//   std::vector<bool> mask = scored_positions(batch);   // the task's choice          // (batch * seq)
//   auto score = accuracy(predicted, batch["targets"].values<std::int64_t>(), mask);
//   std::printf("%.3f of %lld positions\n", score.value(), (long long)score.counted);
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"

namespace shardgraph::data {

// For logits (..., vocab) of a readable dtype (f64, f32, i64, i32): the index of the largest value of
// every row, the first one on ties. Returns (numel / vocab) ids, row-major.
inline std::vector<std::int64_t> argmax_last_dim(const host_tensor& logits) {
  if (logits.shape().empty() || logits.shape().back() < 1)
    fail("argmax_last_dim", "logits need a last dimension of at least one class", "Pass (..., vocab) logits");
  const std::int64_t vocab = logits.shape().back(), rows = logits.numel() / vocab;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t best = 0;
    double best_value = logits.at(r * vocab);
    for (std::int64_t v = 1; v < vocab; ++v) {
      const double value = logits.at(r * vocab + v);
      if (value > best_value) {
        best = v;
        best_value = value;
      }
    }
    ids[static_cast<std::size_t>(r)] = best;
  }
  return ids;
}

struct accuracy_count {
  std::int64_t correct = 0;
  std::int64_t counted = 0;
  // correct / counted; 0 when nothing was counted.
  double value() const {
    return counted == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(counted);
  }
};

// Counts the positions where mask is set, and among them those where predicted equals targets.
// All three have one entry per position.
inline accuracy_count accuracy(std::span<const std::int64_t> predicted, std::span<const std::int64_t> targets,
                               const std::vector<bool>& mask) {
  if (predicted.size() != targets.size() || mask.size() != targets.size())
    fail("accuracy",
         std::to_string(predicted.size()) + " predictions, " + std::to_string(targets.size()) +
             " targets and " + std::to_string(mask.size()) + " mask entries differ in number",
         "Pass one prediction, target and mask entry per position");
  accuracy_count count;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!mask[i]) continue;
    ++count.counted;
    if (predicted[i] == targets[i]) ++count.correct;
  }
  return count;
}

}  // namespace shardgraph::data
