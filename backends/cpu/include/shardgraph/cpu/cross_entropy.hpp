#pragma once
// Cross-entropy of logits against target ids, summed over rows (full vocabulary on this rank).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

// Rows whose target is ignore_index contribute nothing and are not counted (torch's default, -100).
inline constexpr std::int64_t ignore_index = -100;

// Returns sum over counted rows of -log softmax(logits[row])[targets[row]]
//         = sum of (log-sum-exp(logits[row]) - logits[row][targets[row]]), in double.
// logits (rows, vocab); targets (rows). It returns the SUM: the caller divides by the global number
// of counted rows (over micro-batches and data-parallel ranks), which *counted reports for this call
// when non-null. A target outside [0, vocab) other than ignore_index throws shardgraph::error.
template <class T, class Id>
double cross_entropy_sum(const T* logits, const Id* targets, std::int64_t rows, std::int64_t vocab,
                         std::int64_t* counted = nullptr) {
  constexpr auto where = "cpu::cross_entropy_sum";
  detail::check_size(where, "rows", rows);
  detail::check_size(where, "vocab", vocab);
  detail::check_pointer(where, "logits", logits, rows * vocab);
  detail::check_pointer(where, "targets", targets, rows);
  using acc = accumulator_t<T>;
  acc total = 0;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t target = std::int64_t(targets[i]);
    if (target == ignore_index) continue;
    if (target < 0 || target >= vocab) {
      fail(where,
           "target " + std::to_string(target) + " of row " + std::to_string(i) +
               " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
           "check the tokenizer's vocabulary size against the model's, or mark the row with ignore_index "
           "(-100)");
    }
    const T* row = logits + i * vocab;
    const acc row_max = acc(*std::max_element(row, row + vocab));
    acc sum = 0;
    for (std::int64_t j = 0; j < vocab; ++j) sum += std::exp(acc(row[j]) - row_max);
    total += row_max + std::log(sum) - acc(row[target]);
    ++count;
  }
  if (counted != nullptr) *counted = count;
  return double(total);
}

}  // namespace shardgraph::cpu
