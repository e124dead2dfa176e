#pragma once
// durable_files: the few operating-system calls that make a finished file or directory survive a
// crash or a power cut (fsync of the file, then of the directory that names it), and the clean-up
// of temporaries ("<name>.tmp.<pid>") that a killed process left behind. Where the platform lacks
// them (no <unistd.h>), syncing does nothing and every process counts as running.
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#if __has_include(<unistd.h>) && __has_include(<fcntl.h>) && __has_include(<signal.h>)
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#define SHARDGRAPH_HAS_FSYNC 1
#endif

namespace shardgraph::io {

inline long this_process_id() {
#if defined(SHARDGRAPH_HAS_FSYNC)
  return static_cast<long>(::getpid());
#else
  return 0;
#endif
}

// Whether a process with this id runs on this host (a process of another user counts as running).
inline bool process_is_running(long pid) {
#if defined(SHARDGRAPH_HAS_FSYNC)
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
#else
  return pid != 0;
#endif
}

// Flushes and syncs an open file's data to the disk; false (errno set) when that failed.
inline bool sync_file(std::FILE* file) {
  if (std::fflush(file) != 0) return false;
#if defined(SHARDGRAPH_HAS_FSYNC)
  return ::fsync(::fileno(file)) == 0;
#else
  return true;
#endif
}

// Syncs a directory, so that the names created, renamed or removed in it are on the disk.
// Best effort: a file system that cannot sync directories (some network file systems) is accepted.
inline void sync_directory(const std::string& directory) {
#if defined(SHARDGRAPH_HAS_FSYNC)
  const int fd = ::open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  static_cast<void>(::fsync(fd));
  ::close(fd);
#else
  static_cast<void>(directory);
#endif
}

// The number in `name` = "<stem><infix><number>", or -1 when `name` is not of that form.
inline long numbered_name_id(std::string_view name, std::string_view stem, std::string_view infix) {
  const std::string prefix = std::string(stem) + std::string(infix);
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) return -1;
  const std::string_view digits = name.substr(prefix.size());
  long pid = -1;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  return error == std::errc() && end == digits.data() + digits.size() && pid >= 0 ? pid : -1;
}

// The pid in a temporary's name "<stem>.tmp.<pid>", or -1 when `name` is not one of `stem`.
inline long temporary_owner(std::string_view name, std::string_view stem) {
  return numbered_name_id(name, stem, ".tmp.");
}

// Removes "<path>.tmp.<pid>" files beside `path` whose process no longer runs on this host.
inline void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const std::string stem = p.filename().string();
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const long owner = temporary_owner(it->path().filename().string(), stem);
    std::error_code ignored;
    if (owner >= 0 && !process_is_running(owner) && it->is_regular_file(ignored))
      fs::remove(it->path(), ignored);
  }
}

}  // namespace shardgraph::io
