#pragma once
// step_segment: what one run over a program's steps executes.
//
// The steps fall into five phases (plan/step_index.hpp): `pre` (before the forward block: the
// embeddings), the forward block, `post` (after it: head, loss, the seed and the head's backward),
// the backward block, and `tail` (after it: the embeddings' gradients). forward() of one stage runs
// them all (step_segment{}); a pipeline stage runs the part its action asks for
// (runtime/pipeline_runner.hpp).
#include <cstdint>

namespace shardgraph {

struct step_segment {
  bool pre = true, forward_block = true, post = true, backward_block = true, tail = true;
  std::int64_t first_layer = 0, end_layer = -1;  // block layers run, [first, end); -1: every layer
  bool receive_forward_input = false;            // the forward block's input was received: do not copy it
  bool receive_backward_input = false;           // the same for the backward block
  bool zero_tail_input = false;                  // the tail starts from a zero gradient (no backward block)
};

}  // namespace shardgraph
