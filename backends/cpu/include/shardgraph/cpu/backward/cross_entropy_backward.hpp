#pragma once
// Gradient of cross_entropy_sum (cross_entropy.hpp) with respect to the logits, full vocabulary on
// this rank. The mean loss of a step is the sum over every counted row divided by their global
// count, so its gradient is this kernel with scale = (gradient of the loss, usually 1) / that count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/checks.hpp"
#include "shardgraph/cpu/cross_entropy.hpp"

namespace shardgraph::cpu {

// dlogits (rows, vocab) = (softmax(logits[row]) - onehot(targets[row])) * scale per row, and 0 for
// rows whose target is ignore_index (-100). logits (rows, vocab); targets (rows). dlogits is
// written and may be logits (in place). The softmax runs in accumulator_t<T>, as the forward's
// log-sum-exp. Every target is checked before anything is written: one outside [0, vocab) other
// than ignore_index throws shardgraph::error and leaves dlogits untouched.
template <class T, class Id>
void cross_entropy_backward(const T* logits, const Id* targets, T* dlogits, std::int64_t rows,
                            std::int64_t vocab, double scale) {
  constexpr auto where = "cpu::cross_entropy_backward";
  detail::check_size(where, "rows", rows);
  detail::check_size(where, "vocab", vocab);
  detail::check_pointer(where, "logits", logits, rows * vocab);
  detail::check_pointer(where, "targets", targets, rows);
  detail::check_pointer(where, "dlogits", dlogits, rows * vocab);
  if (!std::isfinite(scale)) {
    fail(where, "scale is infinite or NaN",
         "pass the loss gradient divided by the global number of counted rows, e.g. 1.0 / rows");
  }
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t target = std::int64_t(targets[i]);
    if (target != ignore_index && (target < 0 || target >= vocab)) {
      fail(where,
           "target " + std::to_string(target) + " of row " + std::to_string(i) +
               " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
           "check the tokenizer's vocabulary size against the model's, or mark the row with ignore_index "
           "(-100)");
    }
  }
  using acc = accumulator_t<T>;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t target = std::int64_t(targets[i]);
    const T* row = logits + i * vocab;
    T* out = dlogits + i * vocab;
    if (target == ignore_index) {
      std::fill(out, out + vocab, T(0));
      continue;
    }
    const acc row_max = acc(*std::max_element(row, row + vocab));
    acc sum = 0;
    for (std::int64_t j = 0; j < vocab; ++j) sum += std::exp(acc(row[j]) - row_max);
    const acc inverse_sum = 1 / sum;
    for (std::int64_t j = 0; j < vocab; ++j) {
      const acc probability = std::exp(acc(row[j]) - row_max) * inverse_sum;
      out[j] = T((probability - (j == target ? acc(1) : acc(0))) * acc(scale));
    }
  }
}

}  // namespace shardgraph::cpu
