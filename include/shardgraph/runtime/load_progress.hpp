#pragma once
// Progress of a weight load, on stderr: bind on rank 0 reports its own share, which the other ranks
// match within their share's size. Shown for loads of at least 1 GB, or whenever
// SHARDGRAPH_PROGRESS=1; never with SHARDGRAPH_PROGRESS=0. On a terminal one line is redrawn; in a
// log a line is written every 10 %:
//   shardgraph: loading weights (rank 0): 6.74 / 13.48 GB (50 %), 2.31 GB/s, 3 s left
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <unistd.h>

namespace shardgraph {

class load_progress {
 public:
  static constexpr std::uint64_t automatic_threshold = 1'000'000'000;  // bytes

  load_progress(std::uint64_t total_bytes, bool reporting_rank) : total_(total_bytes) {
    const char* setting = std::getenv("SHARDGRAPH_PROGRESS");
    const std::string_view s = setting ? setting : "";
    const bool forced = !s.empty() && s != "0", off = s == "0";
    shown_ = reporting_rank && total_ > 0 && !off && (forced || total_ >= automatic_threshold);
    terminal_ = shown_ && isatty(fileno(stderr)) == 1;
  }
  load_progress(const load_progress&) = delete;
  load_progress& operator=(const load_progress&) = delete;
  ~load_progress() { finish(); }

  void add(std::uint64_t bytes) {
    done_ += bytes;
    if (!shown_) return;
    const int percent = static_cast<int>(100 * done_ / total_);
    if (terminal_ ? elapsed() - last_print_ < 0.2 && done_ < total_ : percent / 10 == last_decile_) return;
    last_decile_ = percent / 10;
    last_print_ = elapsed();
    print(percent);
  }

  void finish() {
    if (!shown_ || finished_) return;
    finished_ = true;
    if (last_decile_ < 10) print(100);
    if (terminal_) std::fputc('\n', stderr);
  }

 private:
  std::uint64_t total_ = 0, done_ = 0;
  bool shown_ = false, terminal_ = false, finished_ = false;
  int last_decile_ = -1;
  double last_print_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  void print(int percent) const {
    const double t = elapsed(), rate = t > 0 ? static_cast<double>(done_) / t : 0;
    const double left = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0;
    const double unit = total_ >= 1'000'000'000 ? 1e9 : 1e6;
    std::fprintf(stderr,
                 "%sshardgraph: loading weights (rank 0): %.2f / %.2f %s (%d %%), %.2f GB/s, %.0f s left%s",
                 terminal_ ? "\r" : "", static_cast<double>(done_) / unit, static_cast<double>(total_) / unit,
                 unit == 1e9 ? "GB" : "MB", percent, rate / 1e9, left, terminal_ ? "   " : "\n");
    std::fflush(stderr);
  }
};

}  // namespace shardgraph
