#pragma once
// The checksums of a safetensors file's tensors, as write_safetensors stores them: for each tensor
// the metadata entry "crc32c:<name>" holds the CRC-32C (crc32c.hpp) of every 1 MiB block of the
// tensor's bytes, in order, as eight lowercase hex digits each with nothing between them (the last
// block may be shorter; an empty tensor has one block, whose CRC-32C is 00000000):
//   "crc32c:wte.weight": "9a0c41f203b7e5d1..."        (a 2 MiB tensor: two blocks)
// Blocks let a reader check just the bytes it reads: a rank loading its slice of a tensor checks
// the blocks that slice touches, each once, and never reads the rest.
// block_checksums holds a file's checksums and which blocks have been checked. It is shared by the
// ranks of one process that read the same file (safetensors_file is), so the flags are atomic.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/io/crc32c.hpp"

namespace shardgraph::io {

inline constexpr std::string_view checksum_key_prefix = "crc32c:";  // metadata "crc32c:<tensor>"
inline constexpr std::uint64_t checksum_block_bytes = std::uint64_t{1} << 20;

// How many blocks a tensor of `bytes` bytes has.
constexpr std::size_t checksum_block_count(std::uint64_t bytes) {
  return bytes == 0 ? 1 : static_cast<std::size_t>((bytes + checksum_block_bytes - 1) / checksum_block_bytes);
}

// The CRC-32Cs in a "crc32c:<name>" value, or nullopt when it is not `blocks` groups of eight
// lowercase hex digits.
inline std::optional<std::vector<std::uint32_t>> parse_block_checksums(std::string_view text,
                                                                       std::size_t blocks) {
  if (text.size() / 8 != blocks || text.size() % 8 != 0) return std::nullopt;
  std::vector<std::uint32_t> crcs(blocks, 0);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool digit = c >= '0' && c <= '9', letter = c >= 'a' && c <= 'f';
    if (!digit && !letter) return std::nullopt;
    crcs[i / 8] = crcs[i / 8] << 4 | static_cast<std::uint32_t>(digit ? c - '0' : c - 'a' + 10);
  }
  return crcs;
}

class block_checksums {
 public:
  // The problem with a tensor's bytes [first, last), or empty when its blocks there match (each
  // block is checked once; later calls skip it). `bytes` are all of the tensor's bytes.
  struct mismatch {
    std::uint64_t block_begin = 0, block_end = 0;
    std::uint32_t found = 0, stored = 0;
  };

  explicit block_checksums(std::size_t tensors = 0) : crcs_(tensors), first_flag_(tensors, 0) {}

  void set(std::size_t tensor, std::vector<std::uint32_t> crcs) { crcs_[tensor] = std::move(crcs); }
  bool has(std::size_t tensor) const { return !crcs_[tensor].empty(); }
  // Call once every set() is done: makes the checked-block flags.
  void seal() {
    std::size_t flags = 0;
    for (std::size_t t = 0; t < crcs_.size(); ++t)
      first_flag_[t] = std::exchange(flags, flags + crcs_[t].size());
    checked_ = std::make_unique<std::atomic<bool>[]>(flags);
  }

  std::optional<mismatch> verify(std::size_t tensor, std::span<const std::byte> bytes, std::uint64_t first,
                                 std::uint64_t last) const {
    const std::vector<std::uint32_t>& crcs = crcs_[tensor];
    if (crcs.empty()) return std::nullopt;
    const std::size_t from = static_cast<std::size_t>(first / checksum_block_bytes);
    const std::size_t to = last <= first ? from : checksum_block_count(last);
    for (std::size_t b = from; b < std::min(to, crcs.size()); ++b) {
      std::atomic<bool>& checked = checked_[first_flag_[tensor] + b];
      if (checked.load(std::memory_order_acquire)) continue;
      const std::uint64_t begin = b * checksum_block_bytes;
      const std::uint64_t end = std::min<std::uint64_t>(begin + checksum_block_bytes, bytes.size());
      const std::uint32_t found = crc32c_update(0, bytes.subspan(begin, end - begin));
      if (found != crcs[b]) return mismatch{begin, end, found, crcs[b]};
      checked.store(true, std::memory_order_release);
    }
    return std::nullopt;
  }

 private:
  std::vector<std::vector<std::uint32_t>> crcs_;  // per tensor, per block; empty: no checksum
  std::vector<std::size_t> first_flag_;           // per tensor, its first block's flag
  std::unique_ptr<std::atomic<bool>[]> checked_;
};

}  // namespace shardgraph::io
