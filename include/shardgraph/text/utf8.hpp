#pragma once
// UTF-8 helpers of the tokenizers: code points in and out, and the lossy conversion that turns
// decoded bytes into text the way Rust's String::from_utf8_lossy does (the `tokenizers` package's
// decoders use it), so that decode() matches that package on byte sequences that are not UTF-8.
#include <cstddef>
#include <string>
#include <string_view>

#include "shardgraph/io/json.hpp"

namespace shardgraph::text::utf8 {

inline constexpr std::string_view replacement_character = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed sequence at s[pos], 0 when there is none (io::json's definition).
constexpr std::size_t sequence_length(std::string_view s, std::size_t pos) {
  return io::json::utf8_sequence_length(s, pos);
}
constexpr bool is_valid(std::string_view s) { return io::json::is_valid_utf8(s); }

// The code point of the well-formed sequence of `length` bytes at s[pos].
constexpr char32_t decode_at(std::string_view s, std::size_t pos, std::size_t length) {
  const auto byte = [&](std::size_t i) {
    return static_cast<char32_t>(static_cast<unsigned char>(s[pos + i]));
  };
  if (length == 1) return byte(0);
  char32_t code = byte(0) & (0x7f >> length);
  for (std::size_t i = 1; i < length; ++i) code = (code << 6) | (byte(i) & 0x3f);
  return code;
}

inline void append(std::string& out, char32_t code) {
  const auto put = [&](char32_t b) { out += static_cast<char>(b); };
  if (code < 0x80) {
    put(code);
  } else if (code < 0x800) {
    put(0xc0 | (code >> 6)), put(0x80 | (code & 0x3f));
  } else if (code < 0x10000) {
    put(0xe0 | (code >> 12)), put(0x80 | ((code >> 6) & 0x3f)), put(0x80 | (code & 0x3f));
  } else {
    put(0xf0 | (code >> 18)), put(0x80 | ((code >> 12) & 0x3f)), put(0x80 | ((code >> 6) & 0x3f));
    put(0x80 | (code & 0x3f));
  }
}

// Length of the longest prefix at s[pos] that could still begin a well-formed sequence (at least
// 1): the "maximal subpart" that from_utf8_lossy replaces by one U+FFFD.
constexpr std::size_t invalid_subpart_length(std::string_view s, std::size_t pos) {
  const auto [length, low, high] = io::json::utf8_lead_of(static_cast<unsigned char>(s[pos]));
  if (length <= 1) return 1;
  std::size_t taken = 1;
  for (; taken < length && pos + taken < s.size(); ++taken) {
    const auto b = static_cast<unsigned char>(s[pos + taken]);
    if (b < (taken == 1 ? low : 0x80) || b > (taken == 1 ? high : 0xbf)) break;
  }
  return taken;
}

// `bytes` as text: well-formed sequences kept, each maximal invalid subpart replaced by U+FFFD.
inline std::string from_bytes_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t pos = 0; pos < bytes.size();) {
    if (const std::size_t n = sequence_length(bytes, pos); n > 0) {
      out.append(bytes.substr(pos, n));
      pos += n;
    } else {
      out += replacement_character;
      pos += invalid_subpart_length(bytes, pos);
    }
  }
  return out;
}

}  // namespace shardgraph::text::utf8
