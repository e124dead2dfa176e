#pragma once
// The pre-tokenizer: cuts normalized text into words, each of which the BPE model encodes on its
// own. The steps of tokenizer.json that byte-level and SentencePiece-style tokenizers use:
//   ByteLevel  (GPT-2)      optionally splits by GPT-2's regex, then writes each byte as its
//                           character (byte_level_alphabet.hpp): "Hello world" -> "Hello", "Ġworld"
//   Split      (LLaMA-3)    splits by a regex or string; the matches are removed, isolated,
//                           merged with the previous or next piece, or merged when contiguous
//   Metaspace  (SentencePiece) replaces ' ' by '▁', prepends '▁' ("always", or "first": only to
//                           the text that begins the input), optionally splits before each '▁'
// A Sequence of them runs each step over every piece the previous one made.
#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "shardgraph/text/byte_level_alphabet.hpp"
#include "shardgraph/text/unicode_regex.hpp"

namespace shardgraph::text {

// GPT-2's split regex, which the ByteLevel step applies when use_regex is true.
inline constexpr std::string_view gpt2_split_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A piece of text on its way to the model. starts_input: it begins at the first character of the
// input (Metaspace's prepend_scheme "first" prepends only to such a piece).
struct text_piece {
  std::string text;
  bool starts_input = false;
};

enum class split_behaviour { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct byte_level_pre_tokenizer {
  bool add_prefix_space = false;                  // prepend ' ' to a piece that does not start with one
  std::shared_ptr<const unicode_regex> split_by;  // GPT-2's regex, or null (use_regex false)
};
struct split_pre_tokenizer {
  std::shared_ptr<const unicode_regex> pattern;
  split_behaviour behaviour = split_behaviour::isolated;
  bool invert = false;  // the pattern's matches are the text between the delimiters
};
enum class prepend_scheme { always, first, never };
struct metaspace_pre_tokenizer {
  std::string replacement;                                   // one character, usually "▁" (U+2581)
  std::shared_ptr<const unicode_regex> replacement_pattern;  // the replacement as a literal, to split by
  prepend_scheme scheme = prepend_scheme::always;
  bool split = true;
};
using pre_tokenizer_step =
    std::variant<byte_level_pre_tokenizer, split_pre_tokenizer, metaspace_pre_tokenizer>;

// The ranges of `text` that a split keeps, in order: `matches` (sorted, non-overlapping) cut text
// into spans that are or are not matches; `behaviour` says what becomes of the matches.
// Empty ranges are dropped.
inline std::vector<byte_range> split_ranges(std::size_t text_size, const std::vector<byte_range>& matches,
                                            split_behaviour behaviour, bool invert) {
  struct span {
    byte_range range;
    bool is_match;
  };
  std::vector<span> spans;
  std::size_t previous_end = 0;
  for (const byte_range& m : matches) {
    if (previous_end != m.begin) spans.push_back({{previous_end, m.begin}, invert});
    spans.push_back({m, !invert});
    previous_end = m.end;
  }
  if (previous_end != text_size || spans.empty()) spans.push_back({{previous_end, text_size}, invert});

  std::vector<byte_range> kept;
  bool previous_match = false;
  const auto extend_last_or_push = [&](const span& s, bool merge) {
    if (merge && !kept.empty())
      kept.back().end = s.range.end;
    else
      kept.push_back(s.range);
  };
  if (behaviour == split_behaviour::merged_with_next) {  // walks backwards, as the matches join what follows
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
      if (it->is_match && !previous_match && !kept.empty())
        kept.back().begin = it->range.begin;
      else
        kept.push_back(it->range);
      previous_match = it->is_match;
    }
    std::reverse(kept.begin(), kept.end());
  } else {
    for (const span& s : spans) {
      switch (behaviour) {
        case split_behaviour::removed:
          if (!s.is_match) kept.push_back(s.range);
          break;
        case split_behaviour::isolated:
          kept.push_back(s.range);
          break;
        case split_behaviour::merged_with_previous:
          extend_last_or_push(s, s.is_match && !previous_match);
          break;
        case split_behaviour::contiguous:
          extend_last_or_push(s, s.is_match == previous_match);
          break;
        case split_behaviour::merged_with_next:
          break;
      }
      previous_match = s.is_match;
    }
  }
  std::erase_if(kept, [](const byte_range& r) { return r.begin == r.end; });
  return kept;
}

class pre_tokenizer {
 public:
  pre_tokenizer() = default;  // none: each piece is one word
  explicit pre_tokenizer(std::vector<pre_tokenizer_step> steps) : steps_(std::move(steps)) {}

  std::vector<text_piece> apply(text_piece input) const {
    std::vector<text_piece> pieces;
    pieces.push_back(std::move(input));
    for (const pre_tokenizer_step& step : steps_) {
      std::vector<text_piece> next;
      for (text_piece& piece : pieces)
        std::visit([&](const auto& s) { apply_step(s, std::move(piece), next); }, step);
      pieces = std::move(next);
    }
    return pieces;
  }

 private:
  std::vector<pre_tokenizer_step> steps_;

  static void split_into(const text_piece& piece, const std::vector<byte_range>& ranges,
                         std::vector<text_piece>& out) {
    for (const byte_range& r : ranges)
      out.push_back({piece.text.substr(r.begin, r.end - r.begin), piece.starts_input && r.begin == 0});
  }

  static void apply_step(const byte_level_pre_tokenizer& step, text_piece piece,
                         std::vector<text_piece>& out) {
    if (step.add_prefix_space && !piece.text.starts_with(' ')) piece.text.insert(0, " ");
    const std::size_t first = out.size();
    if (step.split_by)
      split_into(piece,
                 split_ranges(piece.text.size(), step.split_by->find_all(piece.text),
                              split_behaviour::isolated, false),
                 out);
    else
      out.push_back(std::move(piece));
    for (std::size_t i = first; i < out.size(); ++i) out[i].text = gpt2_byte_alphabet.encode(out[i].text);
  }

  static void apply_step(const split_pre_tokenizer& step, text_piece piece, std::vector<text_piece>& out) {
    split_into(
        piece,
        split_ranges(piece.text.size(), step.pattern->find_all(piece.text), step.behaviour, step.invert),
        out);
  }

  static void apply_step(const metaspace_pre_tokenizer& step, text_piece piece,
                         std::vector<text_piece>& out) {
    std::string replaced;
    for (const char c : piece.text) c == ' ' ? void(replaced += step.replacement) : void(replaced += c);
    piece.text = std::move(replaced);
    const bool prepend =
        step.scheme == prepend_scheme::always || (step.scheme == prepend_scheme::first && piece.starts_input);
    if (prepend && !piece.text.starts_with(step.replacement)) piece.text.insert(0, step.replacement);
    if (!step.split) return out.push_back(std::move(piece));
    split_into(piece,
               split_ranges(piece.text.size(), step.replacement_pattern->find_all(piece.text),
                            split_behaviour::merged_with_next, false),
               out);
  }
};

}  // namespace shardgraph::text
