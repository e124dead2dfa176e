#pragma once
// unicode_regex: a PCRE2 pattern compiled in UTF and UCP mode, so that \p{L}, \p{N}, \s and \w
// follow the Unicode character database that PCRE2 ships (the split regexes of GPT-2 and LLaMA-3
// are written against those classes). The only header of shardgraph that includes <pcre2.h>:
// link shardgraph::text to use it.
// tokenizer.json's regexes are Oniguruma's, whose \s is Unicode's White_Space property; PCRE2
// 10.42's \s also matches U+180E, so \s and \S are compiled as \p{White_Space} and \P{White_Space}.
//
//   unicode_regex digits("\\p{N}{1,3}", "pre_tokenizer.pattern");
//   digits.find_all("x12345")      // {{1, 4}, {4, 6}}: byte ranges [begin, end) of "123", "45"
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include "shardgraph/core/error.hpp"
#include "shardgraph/text/utf8.hpp"

namespace shardgraph::text {

struct byte_range {
  std::size_t begin = 0, end = 0;  // [begin, end) in bytes
  friend bool operator==(const byte_range&, const byte_range&) = default;
};

class unicode_regex {
 public:
  enum class syntax { regex, literal };

  // `field` names where the pattern came from (e.g. "pre_tokenizer.pattern.Regex") in messages.
  unicode_regex(std::string_view pattern, std::string_view field, syntax kind = syntax::regex) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    const uint32_t options =
        PCRE2_UTF | (kind == syntax::literal ? PCRE2_LITERAL : PCRE2_UCP);  // LITERAL refuses UCP
    const std::string compiled =
        kind == syntax::literal ? std::string(pattern) : with_white_space_property(pattern);
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), options,
                              &error_code, &error_offset, nullptr));
    if (!code_)
      fail(
          "tokenizer",
          std::string(field) + " \"" + std::string(pattern) + "\" is not a regex PCRE2 accepts: " +
              message_of(error_code) + " at byte " + std::to_string(error_offset),
          "Check the pattern; tokenizer.json regexes are Oniguruma's, and PCRE2 reads the common ones alike");
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);  // optional: without JIT, matching interprets
  }

  // Every non-overlapping match in `subject`, leftmost first, as Oniguruma's find_iter gives them:
  // after an empty match the search resumes one character later. Contract: subject is UTF-8.
  std::vector<byte_range> find_all(std::string_view subject) const {
    std::vector<byte_range> matches;
    const match_block block(code_.get());
    for (std::size_t start = 0; start <= subject.size();) {
      const auto found = match_at(block, subject, start, 0);
      if (!found) break;
      matches.push_back(*found);
      if (found->end > found->begin) {
        start = found->end;
      } else {
        if (found->end >= subject.size()) break;
        const std::size_t n = utf8::sequence_length(subject, found->end);
        start = found->end + (n == 0 ? 1 : n);
      }
    }
    return matches;
  }

  // `subject` with every non-empty match replaced by `content`.
  std::string replace_all(std::string_view subject, std::string_view content) const {
    std::string out;
    std::size_t kept = 0;
    for (const byte_range& match : find_all(subject)) {
      if (match.end == match.begin) continue;
      out.append(subject.substr(kept, match.begin - kept)).append(content);
      kept = match.end;
    }
    return out.append(subject.substr(kept));
  }

  // The length of a match that begins exactly at subject[pos], or none.
  std::optional<std::size_t> match_length_at(std::string_view subject, std::size_t pos) const {
    const auto found = match_at(match_block(code_.get()), subject, pos, PCRE2_ANCHORED);
    if (!found) return std::nullopt;
    return found->end - found->begin;
  }

 private:
  struct code_deleter {
    void operator()(pcre2_code* code) const { pcre2_code_free(code); }
  };
  // PCRE2's per-match state, one per search, so that threads may share a compiled regex.
  struct match_block {
    explicit match_block(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
      if (!data) fail("tokenizer", "out of memory for a regex match", "Free memory and retry");
    }
    match_block(const match_block&) = delete;
    match_block& operator=(const match_block&) = delete;
    ~match_block() { pcre2_match_data_free(data); }
    pcre2_match_data* data;
  };
  std::unique_ptr<pcre2_code, code_deleter> code_;

  // `pattern` with each \s and \S escape written as the White_Space property (other escapes,
  // \\s included, are copied as they are).
  static std::string with_white_space_property(std::string_view pattern) {
    std::string out;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] != '\\' || i + 1 == pattern.size()) {
        out += pattern[i];
        continue;
      }
      const char escaped = pattern[++i];
      out += escaped == 's'   ? "\\p{White_Space}"
             : escaped == 'S' ? "\\P{White_Space}"
                              : std::string{'\\', escaped};
    }
    return out;
  }

  static std::string message_of(int error_code) {
    PCRE2_UCHAR buffer[256];
    if (pcre2_get_error_message(error_code, buffer, sizeof buffer) < 0)
      return "error " + std::to_string(error_code);
    return reinterpret_cast<const char*>(buffer);
  }

  std::optional<byte_range> match_at(const match_block& block, std::string_view subject, std::size_t start,
                                     uint32_t options) const {
    const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(),
                               start, options | PCRE2_NO_UTF_CHECK, block.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return std::nullopt;
    if (rc < 0)
      fail("tokenizer", "matching a pre-tokenizer regex failed: " + message_of(rc),
           "Report the text and the tokenizer.json; a pattern this expensive is not one of the common ones");
    const PCRE2_SIZE* offsets = pcre2_get_ovector_pointer(block.data);
    return byte_range{offsets[0], offsets[1]};
  }
};

}  // namespace shardgraph::text
