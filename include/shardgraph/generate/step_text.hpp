#pragma once
// step_text: one scheduled step as text, for logs and for reading what the scheduler decided.
//
//   step_text(step) ->
//     "step: 2 sequences, 3 tokens; preempted 1
//        request 0: decode position 4, blocks [0, 1, 3], samples
//        request 1: prefill positions [0, 2), blocks [2]"
#include <cstddef>
#include <string>

#include "shardgraph/generate/scheduler.hpp"

namespace shardgraph::generate {

inline std::string step_text(const scheduled_step& step) {
  const auto n = [](std::int64_t v) { return std::to_string(v); };
  std::string text = "step: " + n(static_cast<std::int64_t>(step.sequences.size())) + " sequences, " +
                     n(step.tokens) + " tokens";
  for (std::size_t i = 0; i < step.preempted.size(); ++i)
    text += (i == 0 ? "; preempted " : ", ") + n(step.preempted[i]);
  for (const scheduled_sequence& s : step.sequences) {
    const auto end = s.first_position + static_cast<std::int64_t>(s.tokens.size());
    text += "\n  request " + n(s.id) + ": ";
    text += s.prefill ? "prefill positions [" + n(s.first_position) + ", " + n(end) + ")"
                      : "decode position " + n(s.first_position);
    text += ", blocks [";
    for (std::size_t b = 0; b < s.block_table.size(); ++b) text += (b == 0 ? "" : ", ") + n(s.block_table[b]);
    text += "]";
    if (s.samples) text += ", samples";
  }
  return text;
}

}  // namespace shardgraph::generate
