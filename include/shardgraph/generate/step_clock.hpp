#pragma once
// step_clock: the generation_stats (llm_output.hpp) of one replica, from runner_options::on_step
// and the binding time of its make_rank. A step runs from its on_step to the next one (or to
// finish()); the binds made during it are taken off its time.
//
//   step_clock clock;
//   options.on_step = [&](const scheduled_step& s) { clock.begin(s); };
//   ... make_rank: clock.add_bind_seconds(seconds) ...
//   clock.finish();   // after run_generation
#include <chrono>
#include <cstdint>

#include "shardgraph/generate/llm_output.hpp"
#include "shardgraph/generate/scheduler.hpp"

namespace shardgraph::generate {

class step_clock {
 public:
  void begin(const scheduled_step& step) {
    finish();
    running_ = true;
    start_ = std::chrono::steady_clock::now();
    bind_in_step_ = 0;
    prefill_ = false;
    step_tokens_ = 0;
    for (const scheduled_sequence& q : step.sequences) {
      prefill_ |= q.prefill;
      if (q.prefill) step_tokens_ += static_cast<std::int64_t>(q.tokens.size());
      stats_.generated_tokens += q.samples ? 1 : 0;
    }
    if (!prefill_) step_tokens_ = static_cast<std::int64_t>(step.sequences.size());
    stats_.preemptions += static_cast<std::int64_t>(step.preempted.size());
    ++stats_.steps;
  }
  void add_bind_seconds(double seconds) {
    bind_in_step_ += seconds;
    stats_.bind_seconds += seconds;
  }
  // Ends the step being timed, if any.
  void finish() {
    if (!running_) return;
    running_ = false;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() - bind_in_step_;
    (prefill_ ? stats_.prefill_tokens : stats_.decode_tokens) += step_tokens_;
    (prefill_ ? stats_.prefill_seconds : stats_.decode_seconds) += seconds;
  }
  const generation_stats& stats() const { return stats_; }

 private:
  generation_stats stats_;
  std::chrono::steady_clock::time_point start_{};
  double bind_in_step_ = 0;
  bool running_ = false, prefill_ = false;
  std::int64_t step_tokens_ = 0;
};

}  // namespace shardgraph::generate
