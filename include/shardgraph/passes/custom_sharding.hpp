#pragma once
// A custom op's placements on one mesh axis, from its sharding rule (ir/sharding_rule.hpp):
//   - the letter sharded on this axis is that of the first input sharded along a dimension whose
//     letter is in the output or summed over; every input naming that letter needs it sharded
//     there, every other input needs Replicate; the output is sharded along the letter's dimension,
//     or Partial when the op sums over it;
//   - an input sharded along any other dimension, or Partial, needs Replicate (gathered, reduced);
//   - two inputs sharded along different letters that both could pass are a conflict.
//
//   rule "b s d, d -> b s d", input 0 S(0), input 1 R   -> need S(0), R; out S(0)
//   rule "b k, k -> b | sum k", input 0 S(1), input 1 R  -> need S(1), S(0); out P
#include "shardgraph/ir/sharding_rule.hpp"
#include "shardgraph/passes/axis_decision.hpp"

namespace shardgraph::passes::detail {

constexpr axis_decision decide_custom(const sharding_rule& rule, const placement (&in)[max_inputs]) {
  axis_decision r;
  char letter = 0;
  for (int k = 0; k < rule.input_count; ++k) {
    if (!in[k].is_shard() || in[k].dim >= rule.inputs[k].rank) continue;
    const char l = rule.inputs[k].letters[in[k].dim];
    if (rule.output_dim(l) < 0 && !rule.sums_over(l)) continue;
    if (letter == 0) {
      letter = l;
    } else if (l != letter) {
      r.conflict = "two inputs are sharded along different dimensions of the op's sharding rule. shard them "
                   "along the same letter, or redistribute one of them";
      return r;
    }
  }
  for (int k = 0; k < rule.input_count; ++k) {
    const int d = letter != 0 ? rule.dim_of(k, letter) : -1;
    r.need[k] = d >= 0 ? shard_on(d) : replicate;
  }
  if (letter == 0) r.out = replicate;
  else if (const int d = rule.output_dim(letter); d >= 0) r.out = shard_on(d);
  else r.out = partial;
  return r;
}

}  // namespace shardgraph::passes::detail
