#pragma once
// atomic_file_writer: writes "<path>.tmp.<pid>", then commit() renames it onto path. Readers see the
// old file or the whole new one, never a part (rename replaces atomically within a file system), and
// a crash leaves no half-written file under the final name. Where the platform has fsync, the data
// reaches the disk before the rename, and the directory is synced after it, so the new name survives
// a power cut. Without commit() (an exception on the way) the temporary file is removed; temporary
// files of `path` that a killed process left behind ("<path>.tmp.<pid>" of a pid that no longer runs
// on this host) are removed when the next writer of `path` starts. Every failure throws
// shardgraph::error naming path.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/durable_files.hpp"

namespace shardgraph::io {

class atomic_file_writer {
 public:
  explicit atomic_file_writer(std::string path)
      : path_(std::move(path)), temporary_(path_ + ".tmp." + std::to_string(this_process_id())) {
    remove_stale_temporaries(path_);
    file_ = std::fopen(temporary_.c_str(), "wb");
    if (!file_) failed("cannot create " + temporary_ + ": " + std::strerror(errno));
  }
  atomic_file_writer(const atomic_file_writer&) = delete;
  atomic_file_writer& operator=(const atomic_file_writer&) = delete;
  ~atomic_file_writer() {
    if (!file_) return;
    std::fclose(file_);
    std::error_code ignored;
    std::filesystem::remove(temporary_, ignored);
  }

  void write(std::span<const std::byte> bytes) {
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
      failed(std::string("writing failed: ") + std::strerror(errno));
  }
  void write(std::string_view text) { write(std::as_bytes(std::span(text.data(), text.size()))); }

  // Replaces bytes already written, from `offset` on (a header completed after its data).
  void overwrite(std::uint64_t offset, std::span<const std::byte> bytes) {
    const bool ok = std::fflush(file_) == 0 && std::fseek(file_, static_cast<long>(offset), SEEK_SET) == 0 &&
                    (bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size()) &&
                    std::fseek(file_, 0, SEEK_END) == 0;
    if (!ok) failed(std::string("writing failed: ") + std::strerror(errno));
  }
  void overwrite(std::uint64_t offset, std::string_view text) {
    overwrite(offset, std::as_bytes(std::span(text.data(), text.size())));
  }

  void commit() {
    bool ok = std::fflush(file_) == 0;
    ok = ok && sync_file(file_);
    const int error_number = errno;
    ok = (std::fclose(std::exchange(file_, nullptr)) == 0) && ok;
    std::error_code renamed;
    if (ok) std::filesystem::rename(temporary_, path_, renamed);
    if (ok && !renamed) sync_directory(std::filesystem::path(path_).parent_path().string());
    if (!ok || renamed) {
      std::error_code ignored;
      std::filesystem::remove(temporary_, ignored);
      failed(ok ? "cannot rename the finished temporary file onto it: " + renamed.message()
                : std::string("writing failed: ") + std::strerror(error_number));
    }
  }

 private:
  std::string path_, temporary_;
  std::FILE* file_ = nullptr;

  [[noreturn]] void failed(const std::string& why) const {
    fail(path_, why, "Check that the directory exists, is writable, and has space");
  }
};

}  // namespace shardgraph::io
