#pragma once
// token_file: a flat binary file of token ids in the llm.c / nanoGPT .bin shard format, read in place
// (mmap where the platform has it), checked once when opened.
//
//   bytes [0, 1024)   header: 256 little-endian int32
//                       [0] magic   20240520
//                       [1] version 1: tokens are uint16 (the llm.c format)
//                               2: tokens are uint32, this project's extension for vocabularies
//                                  above 65535; llm.c and nanoGPT readers do not accept it
//                       [2] number of tokens n (so at most 2^31 - 1 per file: split bigger corpora)
//                       [3..255] unused, written as zero
//   bytes [1024, 1024 + n * width)   the tokens, little-endian, width 2 (version 1) or 4 (version 2)
//
// Opening throws shardgraph::error, naming the file and the byte offset of the problem, when the file
// is shorter than the header, the magic or the version is wrong, the token count disagrees with the
// file size (truncated, or trailing bytes), or any token id is >= vocab_size. So a token_file that
// exists holds only ids in [0, vocab_size), and every read after opening is in bounds.
//
//   shardgraph::data::write_token_file("train.bin", tokens, 1);
//   shardgraph::data::token_file train("train.bin", 50257);        // GPT-2's vocabulary
//   train.size();   // n
//   train.token(0); // the first id
//
// nanoGPT's own prepare.py writes raw uint16 tokens without this header; such a file fails the magic
// check: write it again with write_token_file (or llm.c's write_datafile).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/atomic_file_writer.hpp"
#include "shardgraph/io/file_contents.hpp"

namespace shardgraph::data {

inline constexpr std::int32_t token_file_magic = 20240520;
inline constexpr std::int64_t token_file_header_bytes = 256 * 4;

// Bytes per token of a token-file version, 0 for an unknown version.
constexpr std::int64_t token_width(std::int64_t version) { return version == 1 ? 2 : version == 2 ? 4 : 0; }

namespace detail {
inline std::uint32_t little_endian_u32(const std::byte* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}
inline std::uint32_t little_endian_u16(const std::byte* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8;
}
inline std::int32_t little_endian_i32(const std::byte* p) {
  return static_cast<std::int32_t>(little_endian_u32(p));  // modular since C++20: two's complement
}
inline void put_little_endian(std::vector<std::byte>& out, std::uint32_t value, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<std::byte>((value >> (8 * i)) & 0xffu));
}
}  // namespace detail

class token_file {
 public:
  // vocab_size: the model's vocabulary; every id in the file must be below it.
  explicit token_file(std::string path, std::int64_t vocab_size)
      : path_(std::move(path)), vocab_size_(vocab_size), contents_(std::vector<std::byte>{}) {
    if (vocab_size_ < 1)
      fail(path_, "vocab_size is " + std::to_string(vocab_size_) + ", not positive",
           "Pass the vocabulary size of the model the tokens are for");
    contents_ = io::file_contents::open(path_);
    check_header();
    check_ids();
  }

  const std::string& path() const { return path_; }
  std::int64_t vocab_size() const { return vocab_size_; }
  int version() const { return version_; }
  std::int64_t size() const { return size_; }

  // The id of token i, 0 <= i < size(); in [0, vocab_size()).
  std::int64_t token(std::int64_t i) const {
    if (i < 0 || i >= size_)
      fail(path_,
           "token " + std::to_string(i) + " is out of range: the file holds " + std::to_string(size_) +
               " tokens",
           "Read tokens 0 to size() - 1");
    return id_at(i);
  }

 private:
  std::string path_;
  std::int64_t vocab_size_;
  io::file_contents contents_;
  int version_ = 0;
  std::int64_t size_ = 0;

  std::int64_t id_at(std::int64_t i) const {
    const std::byte* p = contents_.bytes().data() + token_file_header_bytes + i * token_width(version_);
    return version_ == 1 ? detail::little_endian_u16(p) : detail::little_endian_u32(p);
  }

  void check_header() {
    const auto bytes = contents_.bytes();
    const auto file_size = static_cast<std::int64_t>(bytes.size());
    if (file_size < token_file_header_bytes)
      bad("byte " + std::to_string(file_size) + ": the file ends inside the " +
              std::to_string(token_file_header_bytes) + "-byte header (256 int32)",
          "The file is truncated or is not a token file; write it again");
    const std::int32_t magic = detail::little_endian_i32(bytes.data());
    if (magic != token_file_magic)
      bad("byte 0: the magic number is " + std::to_string(magic) + ", not " +
              std::to_string(token_file_magic),
          "This is not an llm.c token file (nanoGPT's prepare.py writes raw uint16 tokens without a header); "
          "write it with write_token_file");
    const std::int32_t version = detail::little_endian_i32(bytes.data() + 4);
    if (token_width(version) == 0)
      bad("byte 4: the version is " + std::to_string(version) +
              ", not 1 (uint16 tokens) or 2 (uint32 tokens)",
          "Write the file with version 1 or 2");
    version_ = version;
    const std::int32_t count = detail::little_endian_i32(bytes.data() + 8);
    if (count < 0)
      bad("byte 8: the token count is " + std::to_string(count) + ", negative",
          "The header is damaged; write the file again");
    size_ = count;
    const std::int64_t expected = token_file_header_bytes + size_ * token_width(version_);
    const std::string promise = "the header (byte 8) promises " + std::to_string(size_) + " tokens of " +
                                std::to_string(token_width(version_)) + " bytes, " +
                                std::to_string(expected) + " bytes in all";
    if (file_size < expected)
      bad("byte " + std::to_string(file_size) + ": the file ends early: " + promise,
          "The file is truncated (an interrupted copy or download?); write or copy it again");
    if (file_size > expected)
      bad("byte " + std::to_string(expected) + ": " + std::to_string(file_size - expected) +
              " trailing bytes after the last token: " + promise,
          "The token count in the header is wrong or data was appended; write the file again");
  }

  // One pass at open, so that no read later can hand the model an id outside its embedding table.
  void check_ids() const {
    if (version_ == 1 && vocab_size_ > 0xffff) return;  // every uint16 id fits
    for (std::int64_t i = 0; i < size_; ++i) {
      const std::int64_t id = id_at(i);
      if (id < vocab_size_) continue;
      bad("byte " + std::to_string(token_file_header_bytes + i * token_width(version_)) + ": token " +
              std::to_string(i) + " is " + std::to_string(id) + ", not below the vocabulary size " +
              std::to_string(vocab_size_),
          "Pass the vocab size of the model (at least the tokenizer's vocabulary size), or tokenize the data "
          "again with the tokenizer of that model");
    }
  }

  [[noreturn]] void bad(const std::string& why, const std::string& how) const { fail(path_, why, how); }
};

// Writes tokens as a token file of the given version (1: uint16 ids, 2: uint32 ids) at path,
// atomically: readers see the old file or the whole new one. Checks everything before the file is
// created; throws shardgraph::error naming path for a bad version, more than 2^31 - 1 tokens, or an
// id that does not fit the version's width.
inline void write_token_file(const std::string& path, std::span<const std::int64_t> tokens, int version) {
  if (token_width(version) == 0)
    fail(path, "token file version " + std::to_string(version) + " is unknown",
         "Use version 1 (uint16 ids, the llm.c format) or 2 (uint32 ids, for vocabularies above 65535)");
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    fail(path, std::to_string(tokens.size()) + " tokens do not fit one token file (its count is an int32)",
         "Split the tokens into several files of at most 2147483647 tokens");
  const std::int64_t limit = version == 1 ? 0xffff : 0xffffffffll;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] > limit)
      fail(path,
           "token " + std::to_string(i) + " is " + std::to_string(tokens[i]) + ", outside [0, " +
               std::to_string(limit) + "] of version " + std::to_string(version),
           version == 1 ? "Use version 2 for ids above 65535; ids are never negative"
                        : "Ids are never negative");

  const int width = static_cast<int>(token_width(version));
  std::vector<std::byte> chunk;
  chunk.reserve(static_cast<std::size_t>(token_file_header_bytes));
  detail::put_little_endian(chunk, static_cast<std::uint32_t>(token_file_magic), 4);
  detail::put_little_endian(chunk, static_cast<std::uint32_t>(version), 4);
  detail::put_little_endian(chunk, static_cast<std::uint32_t>(tokens.size()), 4);
  chunk.resize(static_cast<std::size_t>(token_file_header_bytes));
  io::atomic_file_writer out(path);
  out.write(chunk);
  constexpr std::size_t tokens_per_chunk = 1 << 16;
  for (std::size_t first = 0; first < tokens.size(); first += tokens_per_chunk) {
    chunk.clear();
    const std::size_t last = std::min(tokens.size(), first + tokens_per_chunk);
    for (std::size_t i = first; i < last; ++i)
      detail::put_little_endian(chunk, static_cast<std::uint32_t>(tokens[i]), width);
    out.write(chunk);
  }
  out.commit();
}

}  // namespace shardgraph::data
