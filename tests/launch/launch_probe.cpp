// launch_probe: a rank program for tests/launch/launcher_test.py, started by tools/shardgraph-run.
//
//   launch_probe exchange          rank 0 shares a blob over TCP; every rank prints what it got
//   launch_probe fail <rank> <code>  that rank exits with <code> at once; the others wait 300 s
//   launch_probe sleep             every rank prints its pid and waits 300 s (for --timeout, and for
//                                  the launcher's death ending it)
//   launch_probe sleep-unwatched   the same without the launcher watchdog (the parent-death signal
//                                  alone must end it)
//
// Each rank prints "rank R of N (local L of M) via <launcher>: ..." and exits 0 when all is well.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <unistd.h>

#include <shardgraph/launch/device_limits.hpp>
#include <shardgraph/launch/launcher_watchdog.hpp>
#include <shardgraph/launch/placement.hpp>
#include <shardgraph/launch/tcp_exchange.hpp>

namespace launch = shardgraph::launch;

int main(int argc, char** argv) {
  try {
    const std::string_view mode = argc > 1 ? argv[1] : "exchange";
    if (mode != "sleep-unwatched") launch::watch_launcher();  // as a rank's bootstrap does
    const launch::placement p = launch::detect_placement();
    const launch::device_limits limits = launch::device_limits_from(launch::process_environment);
    std::printf("rank %d of %d (local %d of %d) via %s: gpus %d, memory cap %lld bytes\n", p.rank,
                p.world_size, p.local_rank, p.local_size, std::string(p.launcher_name()).c_str(), limits.gpus,
                static_cast<long long>(limits.memory_cap(std::int64_t{1} << 40)));
    std::fflush(stdout);
    if (mode == "exchange") {
      std::vector<std::byte> blob(128);
      for (std::size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<std::byte>(i ^ 0x5a);
      const std::vector<std::byte> got = launch::share_from_rank0(
          p, p.rank == 0 ? blob : std::vector<std::byte>{}, std::chrono::seconds(60));
      const bool same = got == blob;
      std::printf("rank %d: blob of %zu bytes %s\n", p.rank, got.size(), same ? "matches" : "DIFFERS");
      return same ? 0 : 1;
    }
    if (mode == "fail" && argc == 4) {
      if (p.rank == std::atoi(argv[2])) {
        std::fprintf(stderr, "rank %d: failing on purpose with status %s\n", p.rank, argv[3]);
        return std::atoi(argv[3]);
      }
      std::this_thread::sleep_for(std::chrono::seconds(300));
      return 0;
    }
    if (mode == "sleep" || mode == "sleep-unwatched") {
      std::printf("rank %d: pid %ld, sleeping\n", p.rank, static_cast<long>(::getpid()));
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(300));
      return 0;
    }
    std::fprintf(stderr, "launch_probe: unknown mode; see tests/launch/launch_probe.cpp\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
