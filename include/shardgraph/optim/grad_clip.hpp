#pragma once
// Gradient clipping by the global norm, as torch.nn.utils.clip_grad_norm_ (norm_type 2), correct under
// every sharding. Each rank:
//   1. sums the squares of the gradient elements it OWNS (sum_of_squares over those slices),
//   2. all-reduces that sum (sum) over the ranks that together own the whole gradient,
//   3. multiplies its gradients by clip_coefficient(global sum, max_norm) (scale).
//
// Ownership rule: every element of the full, unsharded gradient is owned by exactly one rank of the
// reduction group; a rank sums only what it owns. The gradients must be reduced first (no Partial
// placement left: the norm of a sum is not the sum of the addends' norms). Per mesh axis in the group:
//   Shard<d> on the axis:   each rank owns its slice: count it on every rank of the axis.
//   Replicate on the axis:  every rank holds the same copy: count it only on the rank whose coordinate
//                           on that axis is 0. Counting it everywhere counts it axis-size times: the
//                           classic Megatron bug, which Megatron avoids by summing a parameter only
//                           if it is tensor-parallel or the tp rank is 0. Dividing that tensor's sum by
//                           the axis size gives the same value only if the copies are bitwise equal.
// The group is the set of axes on which some gradient is sharded: tp and pp (each stage owns its layers;
// a weight tied across stages, as the embedding of first and last stage, counts on one stage only), and
// dp under ZeRO-2/3 or FSDP (each dp rank owns its shard of the reduced gradient). Under plain data
// parallel every dp rank holds the same all-reduced gradient: leave dp out of the group (or count on
// dp rank 0 only). Every rank of the group then gets the same global sum, hence the same coefficient.
//
// Worked example, tp = 2, the gradients of a column-parallel weight W (Shard<1> on tp) and its
// replicated bias b (Replicate on tp, identical on both ranks):
//   full gradient:  W = [[1, 2], [3, 4]],  b = [1, 2]
//   tp rank 0 holds W[:, 0] = [1, 3] and b;  tp rank 1 holds W[:, 1] = [2, 4] and b.
//   rank 0 owns W[:, 0] and b:  1 + 9 + (1 + 4)  = 15
//   rank 1 owns W[:, 1] only:   4 + 16           = 20
//   all-reduce over tp: 35 = 1 + 4 + 9 + 16 + 1 + 4, the unsharded sum; global norm sqrt(35).
//   The bug (b counted on both ranks): 15 + 25 = 40, norm sqrt(40): every step clips too hard.
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <span>
#include <string>

#include "shardgraph/core/error.hpp"

namespace shardgraph {

// The sum of the squares of `values`, accumulated in double. A NaN or infinity passes through.
template <std::floating_point T>
double sum_of_squares(std::span<const T> values) {
  double sum = 0;
  for (const T x : values) sum += static_cast<double>(x) * static_cast<double>(x);
  return sum;
}

// The L2 norm from the all-reduced sum of squares (what training logs print as the gradient norm).
inline double global_norm(double global_sum_of_squares) {
  if (global_sum_of_squares < 0)
    fail("global_norm", "the sum of squares " + std::to_string(global_sum_of_squares) + " is negative",
         "pass the all-reduced sum_of_squares of the owned gradient elements");
  return std::sqrt(global_sum_of_squares);
}

// The factor to multiply every gradient by: min(1, max_norm / (norm + 1e-6)), torch's clip_coef_clamped.
// As in torch, an infinite norm gives 0 and a NaN norm gives NaN; a loss scaler that skips steps with
// non-finite gradients (loss_scaler.hpp) makes both harmless. max_norm = inf disables clipping.
inline double clip_coefficient(double global_sum_of_squares, double max_norm) {
  if (!(max_norm >= 0))
    fail("clip_coefficient", "max_norm " + std::to_string(max_norm) + " is negative or NaN",
         "give a max_norm >= 0 (GPT-2 training uses 1.0)");
  if (std::isnan(global_sum_of_squares)) return std::numeric_limits<double>::quiet_NaN();
  const double coefficient = max_norm / (global_norm(global_sum_of_squares) + 1e-6);
  return coefficient < 1 ? coefficient : 1.0;
}

// values[i] *= factor, computed in double and stored as T.
template <std::floating_point T>
void scale(std::span<T> values, double factor) {
  for (T& x : values) x = static_cast<T>(static_cast<double>(x) * factor);
}

}  // namespace shardgraph
