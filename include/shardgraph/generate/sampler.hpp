#pragma once
// sampler: the next token of one sequence from the logits of its last position.
//
// The steps run in the order of HF's logits processors (transformers' generate):
//
//   1. repetition penalty   each token id in the history (prompt and generated tokens), once:
//                           logit > 0 -> logit / penalty; logit < 0 -> logit * penalty
//   greedy (temperature 0): the argmax of the penalized logits (the lowest id on a tie); else
//   2. temperature          logit / temperature
//   3. top-k                drop every token whose logit is below the k-th largest (ties with it stay)
//   4. top-p                sort ascending; drop each token whose cumulative probability, counted
//                           from the least likely, is <= 1 - top_p; the most likely always stays
//   5. draw                 u = uniform_draw(seed, n) in [0, 1); the first token id, in increasing
//                           order over the kept ones, whose cumulative probability exceeds u
//
// All arithmetic is in double, whatever the logits' type. The draw of a request's n-th generated
// token (n from 0) depends on (seed, n) only, through splitmix64's mixing function, never on a
// generator's state: so a request gives the same tokens whatever else runs in its batch, in any
// order, on any layout, and after a preemption recomputes it.
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/data/splitmix64.hpp"
#include "shardgraph/generate/sampling_params.hpp"
#include "shardgraph/generate/token_ids.hpp"

namespace shardgraph::generate {

// u in [0, 1) with 53 random bits: mix64(mix64(seed) + n) >> 11, times 2^-53.
inline double uniform_draw(std::uint64_t seed, std::int64_t n) {
  const std::uint64_t word = data::mix64(data::mix64(seed) + static_cast<std::uint64_t>(n));
  return static_cast<double>(word >> 11) * 0x1p-53;
}

inline constexpr double dropped_logit = -std::numeric_limits<double>::infinity();

// Step 1, in place. Each distinct id in `history` is penalized once (HF gathers the scores of the
// ids and scatters them back).
inline void apply_repetition_penalty(std::span<double> logits, std::span<const token_id> history,
                                     double penalty) {
  if (penalty == 1) return;
  std::vector<bool> seen(logits.size(), false);
  for (const token_id t : history) {
    const auto i = static_cast<std::size_t>(t);
    if (seen[i]) continue;
    seen[i] = true;
    logits[i] = logits[i] < 0 ? logits[i] * penalty : logits[i] / penalty;
  }
}

// Step 3, in place: k >= logits.size() or k == 0 keeps all.
inline void apply_top_k(std::span<double> logits, std::int64_t k) {
  if (k <= 0 || k >= static_cast<std::int64_t>(logits.size())) return;
  std::vector<double> sorted(logits.begin(), logits.end());
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  const double kth = sorted[static_cast<std::size_t>(k - 1)];
  for (double& l : logits)
    if (l < kth) l = dropped_logit;
}

// Step 4, in place (dropped tokens of earlier steps stay dropped: their probability is 0).
inline void apply_top_p(std::span<double> logits, double top_p) {
  if (top_p >= 1) return;
  std::vector<std::size_t> order;  // the tokens still kept: after top-k, k of them
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (logits[i] != dropped_logit) order.push_back(i);
  if (order.empty()) return;
  // Ascending by logit; among equals the higher id first, so that the lower id is "more likely".
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return logits[a] < logits[b] || (logits[a] == logits[b] && a > b);
  });
  const double top = logits[order.back()];
  double total = 0;
  for (const double l : logits) total += std::exp(l - top);
  double cumulative = 0;
  for (std::size_t r = 0; r + 1 < order.size(); ++r) {  // the last (most likely) always stays
    const std::size_t i = order[r];
    cumulative += std::exp(logits[i] - top) / total;
    if (cumulative <= 1 - top_p) logits[i] = dropped_logit;
  }
}

// The lowest id among the largest logits.
inline token_id argmax(std::span<const double> logits) {
  return static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Step 5: inverse transform sampling of softmax(logits) at u.
inline token_id draw_from(std::span<const double> logits, double u) {
  const double top = *std::max_element(logits.begin(), logits.end());
  double total = 0;
  for (const double l : logits) total += std::exp(l - top);
  const double target = u * total;
  double cumulative = 0;
  token_id last_kept = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == dropped_logit) continue;
    cumulative += std::exp(logits[i] - top);
    last_kept = static_cast<token_id>(i);
    if (cumulative > target) return last_kept;
  }
  return last_kept;  // u within rounding of 1
}

// The next token of a sequence. `logits`: its last position's, one per vocabulary entry (a model
// with a padded vocabulary passes the first vocab_size only). `history`: the sequence's prompt and
// generated tokens so far. `n`: how many tokens it has generated before this one.
template <std::floating_point T>
token_id sample_next_token(std::span<const T> logits, const sampling_params& params,
                           std::span<const token_id> history, std::int64_t n) {
  if (logits.empty()) fail("sampler", "the logits are empty", "pass one logit per vocabulary entry");
  check_sampling(params, "sampler");
  check_token_ids(history, static_cast<std::int64_t>(logits.size()), "sampler", "history");
  std::vector<double> scores(logits.begin(), logits.end());
  for (std::size_t i = 0; i < scores.size(); ++i)
    if (std::isnan(scores[i]))
      fail("sampler", "logit " + std::to_string(i) + " is NaN",
           "check the model's weights and inputs: rank.set_finite_check(true) makes the forward pass "
           "name the first op that makes a NaN");
  apply_repetition_penalty(scores, history, params.repetition_penalty);
  if (params.greedy()) return argmax(scores);
  for (double& s : scores) s /= params.temperature;
  apply_top_k(scores, params.top_k);
  apply_top_p(scores, params.top_p);
  return draw_from(scores, uniform_draw(params.seed, n));
}

}  // namespace shardgraph::generate
