#pragma once
// sampling_params: how one request picks each next token (generate/sampler.hpp applies them).
//
//   {}                                          greedy: the argmax (HF's do_sample=False)
//   {.temperature = 0.8, .top_p = 0.95, .seed = 7}
//   {.temperature = 1, .top_k = 50, .repetition_penalty = 1.2}
//
// A value of 0 for temperature means greedy, as in vLLM; top_k = 0, top_p = 1 and
// repetition_penalty = 1 switch that step off.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"

namespace shardgraph::generate {

struct sampling_params {
  double temperature = 0;         // 0: greedy; > 0: sample from softmax(logits / temperature)
  std::int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  double top_p = 1;               // keep the most likely tokens whose probabilities sum to top_p; 1: all
  double repetition_penalty = 1;  // HF's: a seen token's logit > 0 is divided by it, < 0 multiplied
  std::uint64_t seed = 0;         // the draws of this request (sampler.hpp: uniform_draw)

  bool greedy() const { return temperature == 0; }
};

// Throws shardgraph::error "<where>: <field> is <value>, ..." for a value outside its range.
inline void check_sampling(const sampling_params& p, std::string_view where) {
  const auto bad = [&](const std::string& field, double value, const char* range, const char* how) {
    fail(where, field + " is " + std::to_string(value) + ", " + range, how);
  };
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature))
    bad("temperature", p.temperature, "not a finite number >= 0",
        "give 0 for greedy or a positive temperature");
  if (!(p.top_p > 0 && p.top_p <= 1))
    bad("top_p", p.top_p, "outside (0, 1]", "give 0 < top_p <= 1 (1 keeps every token)");
  if (p.top_k < 0)
    fail(where, "top_k is " + std::to_string(p.top_k) + ", negative",
         "give top_k >= 0 (0 keeps every token)");
  if (!(p.repetition_penalty > 0) || !std::isfinite(p.repetition_penalty))
    bad("repetition_penalty", p.repetition_penalty, "not a finite number > 0",
        "give a positive penalty (1 for none; HF's examples use 1.2)");
}

}  // namespace shardgraph::generate
