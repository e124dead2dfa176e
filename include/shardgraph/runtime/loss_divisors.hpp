#pragma once
// loss_divisors: what a mean cross_entropy divides its sum by in one run: the number of targets
// that count (are not the ignore index) in the whole step.
//
//   loss_divisors d(g, layout, sizes);        // at bind: the token inputs and each loss's entry
//   d.begin_run(d.counted_targets(g, batch)); // each forward(): checks the ids, counts the targets
//   d.current()[d.entries()[i]];              // loss i's divisor in this run (a mean's; a sum's is 1)
//
// By default a run divides by the counts of the batch it is given (of all micro-batches, in a
// pipeline's step). The trainer, running one step as several forward() calls, gives the step's
// counts (the sums over its micro-batches) with set_step_targets, until it clears them.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/plan/loss_entries.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"
#include "shardgraph/runtime/rank_io.hpp"
#include "shardgraph/runtime/token_inputs.hpp"

namespace shardgraph {

class loss_divisors {
 public:
  loss_divisors() = default;
  loss_divisors(const graph_view& g, const local_layout& layout, const model_sizes& sizes)
      : tokens_(plan_token_inputs(g, layout, sizes)), entry_(plan::plan_loss_entries(g, tokens_)) {}

  // Checks the token ids and targets of `batch` against the vocabulary (runtime/token_inputs.hpp),
  // throwing the same error on every rank before any compute, and returns how many targets count,
  // per cross_entropy that reads an input.
  std::vector<std::int64_t> counted_targets(const graph_view& g, const tensor_map& batch) const {
    return check_token_inputs(g, tokens_, batch);
  }
  // The same summed over micro-batches, every one checked before any compute.
  std::vector<std::int64_t> counted_targets(const graph_view& g, std::span<const tensor_map> batches) const {
    std::vector<std::int64_t> counts;
    for (const tensor_map& batch : batches) {
      const std::vector<std::int64_t> c = counted_targets(g, batch);
      counts.resize(c.size(), 0);
      for (std::size_t k = 0; k < c.size(); ++k) counts[k] += c[k];
    }
    return counts;
  }

  // The input node each count of counted_targets() is of (its targets).
  std::vector<int> targets_inputs() const {
    std::vector<int> inputs;
    for (const token_input& t : tokens_)
      if (t.targets) inputs.push_back(t.input);
    return inputs;
  }

  void set_step_targets(std::vector<std::int64_t> counts) { step_targets_ = std::move(counts); }
  void clear_step_targets() { step_targets_.reset(); }
  const std::optional<std::vector<std::int64_t>>& step_targets() const { return step_targets_; }

  // A run starts: its counts are the step's, when the trainer gave them, else `counted`.
  void begin_run(const std::vector<std::int64_t>& counted) {
    current_ = step_targets_ && step_targets_->size() == counted.size() ? *step_targets_ : counted;
  }
  const std::vector<std::int64_t>& current() const { return current_; }  // this run's, per targets input
  const std::vector<int>& entries() const { return entry_; }  // per node: its index in current() (-1: none)

 private:
  std::vector<token_input> tokens_;    // the inputs of token ids (plan_token_inputs)
  std::vector<int> entry_;             // per node: its count's index in current_ (plan_loss_entries)
  std::vector<std::int64_t> current_;  // this run's counts, per targets input
  std::optional<std::vector<std::int64_t>> step_targets_;  // the trainer's step counts
};

}  // namespace shardgraph
