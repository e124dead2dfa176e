#pragma once
// What the llm's generate() returns for each prompt, and how fast the last call ran.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/generate/request.hpp"
#include "shardgraph/generate/token_ids.hpp"

namespace shardgraph::generate {

struct llm_output {
  std::string text{};              // the generated ids decoded (empty without a tokenizer)
  std::vector<token_id> ids{};     // the generated ids, without the prompt
  std::int64_t prompt_tokens = 0;  // the prompt's ids (a text prompt's after encoding)
  finish_reason reason = finish_reason::failed;
  // The shardgraph: message of a request that failed (reason failed), or of a text that could not
  // be decoded (an id past the tokenizer's vocabulary: text empty, ids and reason kept).
  std::string error{};
  int replica = -1;  // the dp replica that served it (-1: failed before assignment)
};

// Counted on the first rank of each replica. A step holding a prefill chunk is a prefill step:
// its chunks' tokens and its time count as prefill (the decodes riding along included); a step of
// decodes only counts as decode. Binding time (reading weights) is left out of both. Replicas run
// at once: tokens are summed over them, seconds are the largest replica's.
struct generation_stats {
  std::int64_t prefill_tokens = 0;  // fed by prefill chunks (prompts, and recomputes after preemption)
  double prefill_seconds = 0;
  std::int64_t decode_tokens = 0;  // fed by decode-only steps: one per sequence per step
  double decode_seconds = 0;
  std::int64_t generated_tokens = 0;
  std::int64_t steps = 0;
  std::int64_t preemptions = 0;
  double bind_seconds = 0;

  double prefill_tokens_per_second() const {
    return prefill_seconds > 0 ? static_cast<double>(prefill_tokens) / prefill_seconds : 0;
  }
  double decode_tokens_per_second() const {
    return decode_seconds > 0 ? static_cast<double>(decode_tokens) / decode_seconds : 0;
  }

  // Adds a replica that ran beside this one.
  void add_replica(const generation_stats& r) {
    prefill_tokens += r.prefill_tokens;
    decode_tokens += r.decode_tokens;
    generated_tokens += r.generated_tokens;
    steps += r.steps;
    preemptions += r.preemptions;
    prefill_seconds = std::max(prefill_seconds, r.prefill_seconds);
    decode_seconds = std::max(decode_seconds, r.decode_seconds);
    bind_seconds = std::max(bind_seconds, r.bind_seconds);
  }
};

}  // namespace shardgraph::generate
