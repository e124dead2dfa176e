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

// Which columns of a row are classes and which target marks a row ignored. A padded vocabulary
// (vocab rounded up so that it divides over tensor-parallel ranks) has classes < vocab: the
// columns [classes, vocab) are left out of the softmax and get no gradient. 0: every column.
struct cross_entropy_targets {
  std::int64_t classes = 0;
  std::int64_t ignore_index = cpu::ignore_index;
};

namespace detail {
// The number of classes of a row of `vocab` columns; throws unless 0 < classes <= vocab.
inline std::int64_t classes_of(const char* where, const cross_entropy_targets& t, std::int64_t vocab) {
  if (t.classes == 0) return vocab;
  if (t.classes < 0 || t.classes > vocab)
    fail(where, "classes = " + std::to_string(t.classes) + " is not in [1, vocab = " + std::to_string(vocab) + "]",
         "give the real vocabulary size (at most the padded one), or 0 for no padding");
  return t.classes;
}
// Throws for the first target that is neither ignored nor a class.
template <class Id>
void check_targets(const char* where, const Id* targets, std::int64_t rows, std::int64_t classes,
                   std::int64_t ignored) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t target = std::int64_t(targets[i]);
    if (target == ignored || (target >= 0 && target < classes)) continue;
    fail(where,
         "target " + std::to_string(target) + " of row " + std::to_string(i) + " is outside the vocabulary [0, " +
             std::to_string(classes) + ")",
         "check the tokenizer's vocabulary size against the model's, or mark the row with the ignore index (" +
             std::to_string(ignored) + ")");
  }
}
}  // namespace detail

// Returns sum over counted rows of -log softmax(logits[row][0:classes])[targets[row]]
//         = sum of (log-sum-exp(logits[row][0:classes]) - logits[row][targets[row]]), in double.
// logits (rows, vocab); targets (rows). It returns the SUM: the caller divides by the number of
// counted rows of the whole step (over micro-batches and data-parallel ranks), which *counted
// reports for this call when non-null. A target outside [0, classes) other than the ignore index
// throws shardgraph::error.
template <class T, class Id>
double cross_entropy_sum(const T* logits, const Id* targets, std::int64_t rows, std::int64_t vocab,
                         std::int64_t* counted = nullptr, cross_entropy_targets which = {}) {
  constexpr auto where = "cpu::cross_entropy_sum";
  detail::check_size(where, "rows", rows);
  detail::check_size(where, "vocab", vocab);
  detail::check_pointer(where, "logits", logits, rows * vocab);
  detail::check_pointer(where, "targets", targets, rows);
  const std::int64_t classes = detail::classes_of(where, which, vocab);
  detail::check_targets(where, targets, rows, classes, which.ignore_index);
  using acc = accumulator_t<T>;
  acc total = 0;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t target = std::int64_t(targets[i]);
    if (target == which.ignore_index) continue;
    const T* row = logits + i * vocab;
    const acc row_max = acc(*std::max_element(row, row + classes));
    acc sum = 0;
    for (std::int64_t j = 0; j < classes; ++j) sum += std::exp(acc(row[j]) - row_max);
    total += row_max + std::log(sum) - acc(row[target]);
    ++count;
  }
  if (counted != nullptr) *counted = count;
  return double(total);
}

}  // namespace shardgraph::cpu
