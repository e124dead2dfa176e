#pragma once
// The launcher watchdog: a rank started by tools/shardgraph-run ends when shardgraph-run has ended,
// instead of running on (or waiting in a collective) as an orphan.
//
//   shardgraph::launch::watch_launcher();   // once, early in a rank; nccl::world_from_environment does it
//
// shardgraph-run puts its pid in SHARDGRAPH_LAUNCHER_PID. watch_launcher starts one background
// thread per process that checks every `period` whether that process still exists; when it does not,
// the thread prints
//   shardgraph: rank R: the launcher shardgraph-run (pid P) has ended, so this rank ends too. ...
// and ends the process at once (std::_Exit(1): no destructors run beside the rank's own threads).
// On Linux shardgraph-run also gives its direct children the parent-death signal; the watchdog
// covers ranks started through a wrapper (a shell script is the launcher's child, not the rank) and
// platforms without that signal. Without SHARDGRAPH_LAUNCHER_PID (another launcher, or none) it
// does nothing. A process id reused within one period would go unnoticed; that takes a pid space
// wrapping around in half a second.
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "shardgraph/core/error.hpp"
#include "shardgraph/launch/placement.hpp"

#if __has_include(<signal.h>) && __has_include(<unistd.h>)
#include <signal.h>
#include <unistd.h>
#define SHARDGRAPH_HAS_PROCESS_PROBE 1
#endif

namespace shardgraph::launch {

inline constexpr const char* launcher_pid_variable = "SHARDGRAPH_LAUNCHER_PID";

namespace detail {

inline bool launcher_is_running(long pid) {
#if defined(SHARDGRAPH_HAS_PROCESS_PROBE)
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
#else
  static_cast<void>(pid);
  return true;
#endif
}

// The launcher's pid from the environment; nullopt when unset; an error when it is not a pid.
inline std::optional<long> launcher_pid(const environment& env) {
  const std::optional<std::string> text = env(launcher_pid_variable);
  if (!text) return std::nullopt;
  long pid = 0;
  const auto [end, problem] = std::from_chars(text->data(), text->data() + text->size(), pid);
  if (problem != std::errc() || end != text->data() + text->size() || pid <= 1)
    fail("launch::watch_launcher",
         std::string(launcher_pid_variable) + " is \"" + *text + "\", not a process id",
         "leave it to tools/shardgraph-run, which sets it to its own pid, or unset it");
  return pid;
}

}  // namespace detail

// Starts the watchdog (once per process; later calls do nothing). Returns whether one is running.
inline bool watch_launcher(const environment& env = process_environment,
                           std::chrono::milliseconds period = std::chrono::milliseconds(500)) {
  static std::mutex m;
  static bool started = false;
  const std::lock_guard lock(m);
  if (started) return true;
  const std::optional<long> pid = detail::launcher_pid(env);
  if (!pid) return false;
  const int rank = detect_placement(env).rank;
  std::thread([pid = *pid, rank, period] {
    while (detail::launcher_is_running(pid)) std::this_thread::sleep_for(period);
    std::fprintf(
        stderr,
        "shardgraph: rank %d: the launcher shardgraph-run (pid %ld) has ended, so this rank ends too. "
        "Start the run again; see why the launcher ended in its own output\n",
        rank, pid);
    std::fflush(stderr);
    std::_Exit(1);
  }).detach();
  started = true;
  return true;
}

}  // namespace shardgraph::launch
