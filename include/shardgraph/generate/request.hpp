#pragma once
// generation_request: what a caller asks the scheduler for, and generation_result: what it gets
// back when the request finishes (or fails).
//
//   generation_request r{.prompt = {464, 3290, 318}, .max_new_tokens = 32, .stop_tokens = {50256},
//                        .sampling = {.temperature = 0.8, .top_p = 0.95, .seed = 1}};
//
// A request finishes at the first of: a generated token in stop_tokens (kept as the last generated
// token, as HF keeps its eos), max_new_tokens generated, or the sequence filling the model's
// positions (prompt + generated = max_positions). A bad request fails alone: check_request's error
// is its result, and the other requests go on.
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/generate/sampling_params.hpp"
#include "shardgraph/generate/token_ids.hpp"

namespace shardgraph::generate {

using request_id = std::int64_t;  // 0, 1, 2, ... in the order of submission

struct generation_request {
  std::vector<token_id> prompt{};
  std::int64_t max_new_tokens = 16;
  std::vector<token_id> stop_tokens{};
  sampling_params sampling{};
};

enum class finish_reason { stop_token, max_new_tokens, max_positions, cancelled, failed };

inline const char* finish_reason_name(finish_reason r) {
  switch (r) {
    case finish_reason::stop_token:
      return "stop_token";
    case finish_reason::max_new_tokens:
      return "max_new_tokens";
    case finish_reason::max_positions:
      return "max_positions";
    case finish_reason::cancelled:
      return "cancelled";
    case finish_reason::failed:
      return "failed";
  }
  return "?";
}

struct generation_result {
  request_id id = 0;
  std::vector<token_id> generated{};  // without the prompt
  finish_reason reason = finish_reason::failed;
  std::string error{};           // the shardgraph: message, for finish_reason::failed
  std::int64_t preemptions = 0;  // how often it was preempted and recomputed
};

// What the model and the cache allow a request.
struct request_limits {
  std::int64_t vocab_size = 0;
  std::int64_t max_positions = 0;
};

// Throws shardgraph::error "request <id>: ..." for a request no model run can serve.
inline void check_request(const generation_request& r, request_id id, const request_limits& limits) {
  const std::string where = "request " + std::to_string(id);
  const auto n = [](std::int64_t v) { return std::to_string(v); };
  if (r.prompt.empty()) fail(where, "the prompt is empty", "give at least one token id (a BOS token, say)");
  const auto prompt_tokens = static_cast<std::int64_t>(r.prompt.size());
  if (prompt_tokens >= limits.max_positions)
    fail(where,
         "the prompt's " + n(prompt_tokens) + " tokens leave no room for a new token in the model's " +
             n(limits.max_positions) + " positions",
         "give a prompt of at most " + n(limits.max_positions - 1) + " tokens");
  if (r.max_new_tokens <= 0)
    fail(where, "max_new_tokens is " + n(r.max_new_tokens) + ", not positive",
         "ask for at least one new token");
  check_token_ids(r.prompt, limits.vocab_size, where, "prompt");
  check_token_ids(r.stop_tokens, limits.vocab_size, where, "stop");
  check_sampling(r.sampling, where);
}

}  // namespace shardgraph::generate
