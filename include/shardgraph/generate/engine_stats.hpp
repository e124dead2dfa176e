#pragma once
// engine_stats: what a running engine (engine.hpp) reports for monitoring (a server's /metrics).
#include <cstdint>

namespace shardgraph::generate {

// A snapshot over all replicas. Counts of requests and blocks are as of each replica's last step
// boundary; the blocks are one rank's of each replica (its ranks hold the same tables), summed.
struct engine_stats {
  std::int64_t running = 0;  // requests with a sequence in a scheduler's running set
  std::int64_t waiting = 0;  // submitted, not yet running (posted, queued or preempted)
  std::int64_t kv_blocks_used = 0;
  std::int64_t kv_blocks_total = 0;
  std::int64_t generated_tokens = 0;   // since the engine started
  std::int64_t finished_requests = 0;  // since the engine started: any reason, failed included
  // Generated tokens per second of step time (idle time left out), summed over the replicas,
  // which run at once.
  double tokens_per_second = 0;
};

}  // namespace shardgraph::generate
