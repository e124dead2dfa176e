#pragma once
// file_contents: the bytes of a whole file, read-only. Mapped with mmap where the platform has it
// (no copy; the page cache is shared with other readers), read into memory otherwise or when
// mapping fails, or adopted from a vector already in memory.
// The span from bytes() stays valid while the object lives, also across moves.
// Caution, as with every mmap reader: truncating the file while it is mapped makes later reads of
// the lost pages fault (SIGBUS). Replace files by rename (write_safetensors does), never in place.
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"

#if __has_include( \
    <sys/mman.h>) && __has_include(<sys/stat.h>) && __has_include(<fcntl.h>) && __has_include(<unistd.h>)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define SHARDGRAPH_HAS_MMAP 1
#else
#include <filesystem>
#include <fstream>
#endif

namespace shardgraph::io {

class file_contents {
 public:
  explicit file_contents(std::vector<std::byte> bytes) : owned_(std::move(bytes)) {}

  // Throws shardgraph::error naming the path when it cannot be opened or is not a regular file
  // (a FIFO or a device could block or never end).
  static file_contents open(const std::string& path) {
#if defined(SHARDGRAPH_HAS_MMAP)
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block open
    if (fd < 0) cannot_read(path, std::strerror(errno));
    struct closer {
      int fd;
      ~closer() { ::close(fd); }
    } close_on_exit{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) cannot_read(path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) cannot_read(path, "it is not a regular file");
    const auto size = static_cast<std::size_t>(st.st_size);
    if (size == 0) return file_contents(std::vector<std::byte>{});
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      file_contents mapped(std::vector<std::byte>{});
      mapped.mapped_ = static_cast<const std::byte*>(p);
      mapped.mapped_size_ = size;
      return mapped;
    }
    std::vector<std::byte> bytes;
    try {
      bytes.resize(size);
    } catch (const std::bad_alloc&) {
      cannot_read(path, "it cannot be mapped, and " + std::to_string(size) +
                            " bytes of memory to read it into cannot be had");
    }
    for (std::size_t done = 0; done < size;) {
      const ::ssize_t n = ::pread(fd, bytes.data() + done, size - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) cannot_read(path, n < 0 ? std::strerror(errno) : "the file shrank while it was read");
      done += static_cast<std::size_t>(n);
    }
    return file_contents(std::move(bytes));
#else
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) cannot_read(path, "it is missing or not a regular file");
    std::ifstream in(path, std::ios::binary);
    std::vector<std::byte> bytes(static_cast<std::size_t>(std::filesystem::file_size(path, ec)));
    if (ec || !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
      cannot_read(path, "reading it failed");
    return file_contents(std::move(bytes));
#endif
  }

  file_contents(file_contents&& other) noexcept
      : owned_(std::move(other.owned_)),
        mapped_(std::exchange(other.mapped_, nullptr)),
        mapped_size_(std::exchange(other.mapped_size_, 0)) {}
  file_contents& operator=(file_contents&& other) noexcept {
    if (this != &other) {
      unmap();
      owned_ = std::move(other.owned_);
      mapped_ = std::exchange(other.mapped_, nullptr);
      mapped_size_ = std::exchange(other.mapped_size_, 0);
    }
    return *this;
  }
  file_contents(const file_contents&) = delete;
  file_contents& operator=(const file_contents&) = delete;
  ~file_contents() { unmap(); }

  std::span<const std::byte> bytes() const {
    return mapped_ ? std::span<const std::byte>(mapped_, mapped_size_) : std::span<const std::byte>(owned_);
  }
  bool is_mapped() const { return mapped_ != nullptr; }

 private:
  std::vector<std::byte> owned_;
  const std::byte* mapped_ = nullptr;
  std::size_t mapped_size_ = 0;

  void unmap() {
#if defined(SHARDGRAPH_HAS_MMAP)
    if (mapped_) ::munmap(const_cast<std::byte*>(mapped_), mapped_size_);
#endif
    mapped_ = nullptr;
  }
  [[noreturn]] static void cannot_read(const std::string& path, const std::string& why) {
    fail(path, "cannot read the file: " + why, "Check that the path is right and the file is readable");
  }
};

}  // namespace shardgraph::io
