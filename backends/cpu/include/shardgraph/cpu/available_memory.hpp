#pragma once
// available_memory(): the bytes of host memory the system can give a process now without swapping,
// as Linux estimates it (MemAvailable in /proc/meminfo); elsewhere, the free physical pages
// (sysconf), or no limit where neither can be read. bind checks its plan against this
// (runtime/memory_budget.hpp).
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

namespace shardgraph::cpu {

inline std::size_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    std::uint64_t kib = 0;
    if (!(meminfo >> kib)) break;
    if (key == "MemAvailable:") return static_cast<std::size_t>(kib) * 1024;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
#if defined(_SC_AVPHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
#endif
  return std::numeric_limits<std::size_t>::max();
}

}  // namespace shardgraph::cpu
