#pragma once
// Added tokens (tokenizer.json's added_tokens: special ones such as "<|endoftext|>" or "<s>", and
// others a user added): found in the text before the model runs and kept whole, as the
// `tokenizers` package does. At each position the leftmost match wins, and of those the longest
// ("<|end|>" and "<|end_of_text|>": the latter). Per token:
//   lstrip / rstrip  the match takes the whitespace on its left / right with it
//   single_word      it matches only where no word character (\w) touches it on either side
//   normalized       it is matched in the normalized text (tokenizer.hpp), else in the raw input
//
//   splitter over {"<s>" -> 1}:   "a<s>b"  ->  [text 0..1] [token 1, 1..4] [text 4..5]
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/text/unicode_regex.hpp"

namespace shardgraph::text {

struct added_token {
  std::string content;
  std::int32_t id = 0;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

struct text_segment {
  byte_range range;
  std::int32_t token_id = -1;  // the added token matched here; -1: text for the model
};

class added_token_splitter {
 public:
  struct pattern {
    std::string text;  // what to look for: the token's content, normalized when the token is
    added_token token;
  };

  added_token_splitter() = default;
  explicit added_token_splitter(std::vector<pattern> patterns) : patterns_(std::move(patterns)) {
    std::erase_if(patterns_, [](const pattern& p) { return p.text.empty(); });
    for (std::size_t i = 0; i < patterns_.size(); ++i)
      starting_with_[static_cast<unsigned char>(patterns_[i].text[0])].push_back(i);
    for (auto& list : starting_with_)
      std::sort(list.begin(), list.end(),
                [&](std::size_t a, std::size_t b) {  // longest, then first in the file
                  const std::size_t length_a = patterns_[a].text.size(), length_b = patterns_[b].text.size();
                  return length_a != length_b ? length_a > length_b : a < b;
                });
    const bool strips = std::any_of(patterns_.begin(), patterns_.end(), [](const pattern& p) {
      return p.token.lstrip || p.token.rstrip || p.token.single_word;
    });
    if (strips) {
      white_space_ = std::make_shared<const unicode_regex>(R"(\p{White_Space})", "added_tokens");
      // A word character as the package's regex crate has it (\w): letters, marks, decimal digits,
      // connectors; not '²' or '½'.
      word_character_ = std::make_shared<const unicode_regex>(
          R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])", "added_tokens");
    }
  }

  bool empty() const { return patterns_.empty(); }

  // `text` cut into stretches of text and added tokens, in order, covering all of it but the
  // whitespace that lstrip / rstrip tokens took. Contract: text is UTF-8.
  std::vector<text_segment> split(std::string_view text) const {
    std::vector<text_segment> segments;
    std::size_t text_begin = 0;
    for (std::size_t pos = 0; pos < text.size();) {
      const pattern* found = longest_match_at(text, pos);
      if (!found || (found->token.single_word && !stands_alone(text, pos, pos + found->text.size()))) {
        ++pos;
        continue;
      }
      std::size_t begin = pos, end = pos + found->text.size();
      if (found->token.lstrip) begin = std::max(text_begin, whitespace_before(text, begin));
      if (found->token.rstrip) end = whitespace_after(text, end);
      if (text_begin < begin) segments.push_back({{text_begin, begin}, -1});
      segments.push_back({{begin, end}, found->token.id});
      text_begin = pos = end;
    }
    if (text_begin < text.size()) segments.push_back({{text_begin, text.size()}, -1});
    return segments;
  }

 private:
  std::vector<pattern> patterns_;
  std::array<std::vector<std::size_t>, 256> starting_with_;  // by first byte, longest first
  std::shared_ptr<const unicode_regex> white_space_, word_character_;

  const pattern* longest_match_at(std::string_view text, std::size_t pos) const {
    for (const std::size_t i : starting_with_[static_cast<unsigned char>(text[pos])])
      if (text.substr(pos).starts_with(patterns_[i].text)) return &patterns_[i];
    return nullptr;
  }

  // The start of the character that ends at `end` (UTF-8: skip continuation bytes).
  static std::size_t previous_character(std::string_view text, std::size_t end) {
    std::size_t begin = end - 1;
    while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xc0) == 0x80) --begin;
    return begin;
  }
  std::size_t whitespace_before(std::string_view text, std::size_t begin) const {
    while (begin > 0) {
      const std::size_t previous = previous_character(text, begin);
      if (!white_space_->match_length_at(text, previous)) break;
      begin = previous;
    }
    return begin;
  }
  std::size_t whitespace_after(std::string_view text, std::size_t end) const {
    while (end < text.size())
      if (const auto n = white_space_->match_length_at(text, end); n && *n > 0)
        end += *n;
      else
        break;
    return end;
  }
  bool stands_alone(std::string_view text, std::size_t begin, std::size_t end) const {
    const bool word_before =
        begin > 0 && word_character_->match_length_at(text, previous_character(text, begin));
    const bool word_after = end < text.size() && word_character_->match_length_at(text, end);
    return !word_before && !word_after;
  }
};

}  // namespace shardgraph::text
