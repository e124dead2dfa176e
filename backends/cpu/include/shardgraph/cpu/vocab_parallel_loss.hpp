#pragma once
// The vocabulary-parallel cross-entropy's kernels (include/shardgraph/passes/vocab_parallel_loss.hpp):
// this rank holds the logits' columns [offset, offset + columns) of a vocabulary whose first
// `classes` columns are classes, `ranks` ranks holding one slice each. Statistics and sums are
// Partial: the program all-reduces them over the ranks between the calls. Rows whose target is the
// ignore index take no part in the loss or its gradient.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "shardgraph/core/error.hpp"
#include "shardgraph/cpu/accumulator.hpp"

namespace shardgraph::cpu {

// Where this rank's slice of a vocabulary-sharded row lies among the classes.
struct vocab_slice {
  std::int64_t rows = 0, columns = 0, classes = 0, offset = 0, ignore_index = -100, ranks = 1;
  // The slice's columns that are classes: [0, class_columns()).
  std::int64_t class_columns() const { return std::clamp<std::int64_t>(classes - offset, 0, columns); }
};

namespace detail {
// The log-sum-exp of row[0, n), n > 0, in accumulator_t<T>.
template <class T>
accumulator_t<T> row_log_sum_exp(const T* row, std::int64_t n) {
  using acc = accumulator_t<T>;
  const acc top = acc(*std::max_element(row, row + n));
  acc sum = 0;
  for (std::int64_t j = 0; j < n; ++j) sum += std::exp(acc(row[j]) - top);
  return top + std::log(sum);
}
}  // namespace detail

// stats (rows, 2): [the target's logit where this slice holds the target, else 0; the log-sum-exp
// of the slice's classes / ranks, 0 where it holds none].
template <class T>
void vocab_statistics(const T* logits, const std::int64_t* targets, T* stats, const vocab_slice& v) {
  const std::int64_t n = v.class_columns();
  for (std::int64_t r = 0; r < v.rows; ++r) {
    const T* row = logits + r * v.columns;
    const std::int64_t column = targets[r] - v.offset;
    const bool holds = targets[r] != v.ignore_index && column >= 0 && column < n;
    stats[2 * r] = holds ? row[column] : T(0);
    stats[2 * r + 1] = n > 0 ? T(detail::row_log_sum_exp(row, n) / accumulator_t<T>(v.ranks)) : T(0);
  }
}

// sums (rows): the sum over the slice's classes of exp(x - m), m = stats[r][1] (the mean of every
// rank's log-sum-exp, once all-reduced), taken as exp(log-sum-exp - m).
template <class T>
void vocab_exp_sum(const T* logits, const T* stats, T* sums, const vocab_slice& v) {
  using acc = accumulator_t<T>;
  const std::int64_t n = v.class_columns();
  for (std::int64_t r = 0; r < v.rows; ++r)
    sums[r] = n > 0 ? T(std::exp(detail::row_log_sum_exp(logits + r * v.columns, n) - acc(stats[2 * r + 1]))) : T(0);
}

// lse (rows) = m + log(sums): each row's log-sum-exp over every class.
template <class T>
void vocab_log_sum_exp(const T* stats, const T* sums, T* lse, std::int64_t rows) {
  using acc = accumulator_t<T>;
  for (std::int64_t r = 0; r < rows; ++r) lse[r] = T(acc(stats[2 * r + 1]) + std::log(acc(sums[r])));
}

// The sum over counted rows of lse - the target's logit (stats[r][0], all-reduced). An infinite
// lse is the sums' overflow (the ranks' log-sum-exps spread beyond the dtype's range): an error.
template <class T>
double vocab_cross_entropy_sum(const std::int64_t* targets, const T* lse, const T* stats, std::int64_t rows,
                               std::int64_t ignore_index) {
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index) continue;
    if (std::isinf(double(lse[r])) && double(lse[r]) > 0)
      fail("cpu::vocab_cross_entropy_sum",
           "row " + std::to_string(r) + "'s log-sum-exp over the vocabulary-sharded logits overflowed: the ranks' "
           "slices differ by more than the dtype's exponent range",
           "check the logits for diverging values, or compute the loss in f64");
    total += double(lse[r]) - double(stats[2 * r]);
  }
  return total;
}

// dlogits (rows, columns) = (exp(x - lse) - onehot(target)) * scale on the slice's classes; 0 in its
// padding columns and in ignored rows. May write over logits (each element is read before written).
template <class T>
void vocab_cross_entropy_backward(const T* logits, const std::int64_t* targets, const T* lse, T* dlogits,
                                  const vocab_slice& v, double scale) {
  using acc = accumulator_t<T>;
  const std::int64_t n = v.class_columns();
  for (std::int64_t r = 0; r < v.rows; ++r) {
    const T* row = logits + r * v.columns;
    T* out = dlogits + r * v.columns;
    if (targets[r] == v.ignore_index) {
      std::fill(out, out + v.columns, T(0));
      continue;
    }
    for (std::int64_t j = 0; j < n; ++j) {
      const acc probability = std::exp(acc(row[j]) - acc(lse[r]));
      out[j] = T((probability - (v.offset + j == targets[r] ? acc(1) : acc(0))) * acc(scale));
    }
    std::fill(out + n, out + v.columns, T(0));
  }
}

}  // namespace shardgraph::cpu
