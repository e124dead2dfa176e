#pragma once
// The byte-to-character mapping of byte-level BPE (GPT-2's bytes_to_unicode): every byte becomes
// one printable character, so that a BPE vocabulary of characters covers any byte string.
// Bytes that are printable Latin-1 ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves;
// the other 68, in increasing order, to U+0100, U+0101, ... (space 0x20 -> U+0120 'Ġ',
// newline 0x0A -> U+010A 'Ċ').
#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "shardgraph/text/utf8.hpp"

namespace shardgraph::text {

class byte_level_alphabet {
 public:
  constexpr byte_level_alphabet() {
    char32_t next_unprintable = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      character_of_[b] = printable ? char32_t(b) : next_unprintable++;
      byte_of_[character_of_[b]] = static_cast<short>(b);
    }
  }

  constexpr char32_t character(unsigned char byte) const { return character_of_[byte]; }

  // The byte a character stands for; none for a character outside the alphabet.
  constexpr std::optional<unsigned char> byte(char32_t character) const {
    if (character >= byte_of_.size() || byte_of_[character] < 0) return std::nullopt;
    return static_cast<unsigned char>(byte_of_[character]);
  }

  // Each byte of `bytes` as its character, in UTF-8.
  std::string encode(std::string_view bytes) const {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const char c : bytes) utf8::append(out, character(static_cast<unsigned char>(c)));
    return out;
  }

  // The bytes that `characters` (UTF-8) stands for; none when one of its characters is outside
  // the alphabet (such a token, e.g. an added "<|endoftext|>" with only printable ASCII, is then
  // taken as its own bytes by the decoder).
  std::optional<std::string> decode(std::string_view characters) const {
    std::string out;
    for (std::size_t pos = 0; pos < characters.size();) {
      const std::size_t n = utf8::sequence_length(characters, pos);
      if (n == 0) return std::nullopt;
      const auto b = byte(utf8::decode_at(characters, pos, n));
      if (!b) return std::nullopt;
      out += static_cast<char>(*b);
      pos += n;
    }
    return out;
  }

 private:
  std::array<char32_t, 256> character_of_{};
  std::array<short, 0x100 + 68> byte_of_ = [] {  // -1: not a character of the alphabet
    std::array<short, 0x100 + 68> none{};
    none.fill(-1);
    return none;
  }();
};

inline constexpr byte_level_alphabet gpt2_byte_alphabet{};

}  // namespace shardgraph::text
