#pragma once
// Gradient of cross_entropy_sum (cross_entropy.hpp) with respect to the logits, full vocabulary on
// this rank. The mean loss of a step is the sum over every counted row divided by their number in
// the whole step, so its gradient is this kernel with scale = (gradient of the loss, usually 1) /
// that count; a sum's, scale = the loss's gradient.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "shardgraph/cpu/accumulator.hpp"
#include "shardgraph/cpu/checks.hpp"
#include "shardgraph/cpu/cross_entropy.hpp"

namespace shardgraph::cpu {

// dlogits (rows, vocab) = (softmax(logits[row][0:classes]) - onehot(targets[row])) * scale per row
// in the classes' columns; 0 in the padding columns [classes, vocab) and in rows whose target is
// the ignore index. logits (rows, vocab); targets (rows). dlogits is written and may be logits (in
// place). The softmax runs in accumulator_t<T>, as the forward's log-sum-exp. Every target is
// checked before anything is written: one outside [0, classes) other than the ignore index throws
// shardgraph::error and leaves dlogits untouched. scale must be finite where a row counts (a
// mean over no target divides by 0, but then every row is ignored and its gradient is 0).
template <class T, class Id>
void cross_entropy_backward(const T* logits, const Id* targets, T* dlogits, std::int64_t rows,
                            std::int64_t vocab, double scale, cross_entropy_targets which = {}) {
  constexpr auto where = "cpu::cross_entropy_backward";
  detail::check_size(where, "rows", rows);
  detail::check_size(where, "vocab", vocab);
  detail::check_pointer(where, "logits", logits, rows * vocab);
  detail::check_pointer(where, "targets", targets, rows);
  detail::check_pointer(where, "dlogits", dlogits, rows * vocab);
  const std::int64_t classes = detail::classes_of(where, which, vocab);
  detail::check_targets(where, targets, rows, classes, which.ignore_index);
  const bool any_counted = std::any_of(targets, targets + rows, [&](Id t) { return std::int64_t(t) != which.ignore_index; });
  if (any_counted && !std::isfinite(scale)) {
    fail(where, "scale is infinite or NaN",
         "pass the loss gradient divided by the step's number of counted rows, e.g. 1.0 / rows");
  }
  using acc = accumulator_t<T>;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t target = std::int64_t(targets[i]);
    const T* row = logits + i * vocab;
    T* out = dlogits + i * vocab;
    if (target == which.ignore_index) {
      std::fill(out, out + vocab, T(0));
      continue;
    }
    const acc row_max = acc(*std::max_element(row, row + classes));
    acc sum = 0;
    for (std::int64_t j = 0; j < classes; ++j) sum += std::exp(acc(row[j]) - row_max);
    const acc inverse_sum = 1 / sum;
    for (std::int64_t j = 0; j < classes; ++j) {
      const acc probability = std::exp(acc(row[j]) - row_max) * inverse_sum;
      out[j] = T((probability - (j == target ? acc(1) : acc(0))) * acc(scale));
    }
    std::fill(out + classes, out + vocab, T(0));
  }
}

}  // namespace shardgraph::cpu
