#pragma once
// The decoder of tokenizer.json: turns the tokens of a list of ids back into text. As in the
// `tokenizers` package, each step maps the list of token strings to a new list, and the result
// is the concatenation of the last list:
//   ByteLevel     all tokens joined, each character read back as its byte (byte_level_alphabet.hpp;
//                 a token with other characters, such as an added token, as its own bytes),
//                 bytes that are not UTF-8 as U+FFFD
//   ByteFallback  runs of "<0xNN>" tokens as the text of their bytes (U+FFFD per byte when those
//                 bytes are not UTF-8)
//   Metaspace     '▁' -> ' '; in the first token every '▁' is dropped (prepend_scheme not "never")
//   Replace       a string or regex replaced in each token;  Fuse  all tokens joined into one
//   Strip         up to `start` leading and `stop` trailing copies of a character cut from each token
//
//   LLaMA-2's Sequence[Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ", 1, 0)]:
//     ["▁Hello", "▁wor", "ld", "<0x21>"]  ->  " Hello world!"  ->  "Hello world!"
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "shardgraph/text/byte_level_alphabet.hpp"
#include "shardgraph/text/unicode_regex.hpp"
#include "shardgraph/text/utf8.hpp"

namespace shardgraph::text {

struct byte_level_decoder {};
struct byte_fallback_decoder {};
struct fuse_decoder {};
struct metaspace_decoder {
  std::string replacement;          // usually "▁"
  bool drop_in_first_token = true;  // prepend_scheme "always" or "first"
};
struct replace_decoder {
  std::shared_ptr<const unicode_regex> pattern;
  std::string content;
};
struct strip_decoder {
  std::string character;  // one character (UTF-8)
  std::size_t start = 0, stop = 0;
};
using decoder_step = std::variant<byte_level_decoder, byte_fallback_decoder, fuse_decoder, metaspace_decoder,
                                  replace_decoder, strip_decoder>;

class decoder {
 public:
  decoder() = default;  // none: the tokens joined by spaces, as the package does without a decoder
  explicit decoder(std::vector<decoder_step> steps) : steps_(std::move(steps)) {}

  std::string apply(std::vector<std::string> tokens) const {
    if (steps_.empty()) return join(tokens, " ");
    for (const decoder_step& step : steps_)
      tokens = std::visit([&](const auto& s) { return run(s, std::move(tokens)); }, step);
    return join(tokens, "");
  }

 private:
  std::vector<decoder_step> steps_;

  static std::string join(const std::vector<std::string>& tokens, std::string_view separator) {
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) out.append(i ? separator : "").append(tokens[i]);
    return out;
  }

  static std::vector<std::string> run(const byte_level_decoder&, std::vector<std::string> tokens) {
    std::string bytes;
    for (const std::string& token : tokens) bytes += gpt2_byte_alphabet.decode(token).value_or(token);
    return {utf8::from_bytes_lossy(bytes)};
  }

  // The byte of a "<0xNN>" token (hex digits of either case), or -1.
  static int fallback_byte(std::string_view token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
    const auto digit = [](char c) {
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : -1;
    };
    const int high = digit(token[3]), low = digit(token[4]);
    return high < 0 || low < 0 ? -1 : high * 16 + low;
  }
  static std::vector<std::string> run(const byte_fallback_decoder&, std::vector<std::string> tokens) {
    std::vector<std::string> out;
    std::string bytes;
    const auto flush = [&] {
      if (bytes.empty()) return;
      if (utf8::is_valid(bytes))
        out.push_back(bytes);
      else
        out.insert(out.end(), bytes.size(), std::string(utf8::replacement_character));
      bytes.clear();
    };
    for (std::string& token : tokens) {
      if (const int b = fallback_byte(token); b >= 0) {
        bytes += static_cast<char>(b);
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    return out;
  }

  static std::vector<std::string> run(const fuse_decoder&, std::vector<std::string> tokens) {
    return {join(tokens, "")};
  }

  static std::vector<std::string> run(const metaspace_decoder& step, std::vector<std::string> tokens) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::string_view by = i == 0 && step.drop_in_first_token ? "" : " ";
      std::string out;
      std::string_view rest = tokens[i];
      for (std::size_t at; (at = rest.find(step.replacement)) != std::string_view::npos;)
        out.append(rest.substr(0, at)).append(by), rest.remove_prefix(at + step.replacement.size());
      tokens[i] = out.append(rest);
    }
    return tokens;
  }

  static std::vector<std::string> run(const replace_decoder& step, std::vector<std::string> tokens) {
    for (std::string& token : tokens) token = step.pattern->replace_all(token, step.content);
    return tokens;
  }

  static std::vector<std::string> run(const strip_decoder& step, std::vector<std::string> tokens) {
    const std::string_view c = step.character;
    for (std::string& token : tokens) {
      std::string_view t = token;
      for (std::size_t i = 0; i < step.start && !c.empty() && t.starts_with(c); ++i)
        t.remove_prefix(c.size());
      for (std::size_t i = 0; i < step.stop && !c.empty() && t.ends_with(c); ++i) t.remove_suffix(c.size());
      token = std::string(t);
    }
    return tokens;
  }
};

}  // namespace shardgraph::text
