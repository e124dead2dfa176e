#pragma once
// The lexer of the Jinja2 subset that chat templates use (text/chat_template.hpp): template text
// becomes text tokens, {{ ... }} and {% ... %} become begin / expression tokens / end, and {# #}
// comments vanish. Whitespace is handled here, as Jinja2's lexer does it with the settings of
// transformers (trim_blocks=True, lstrip_blocks=True):
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag, `-%}`, `-}}`, `-#}` all after it;
//   - trim_blocks: the first newline after a `%}` or `#}` is dropped;
//   - lstrip_blocks: spaces and tabs from the start of a line to a `{%` or `{#` are dropped
//     (`{%+` keeps them).
//
//   tokenize("Hi {{- name }}!")  // text "Hi", variable_begin, name "name", variable_end, text "!"
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/text/utf8.hpp"

namespace shardgraph::text::jinja {

enum class token_kind {
  text,
  variable_begin,
  variable_end,
  block_begin,
  block_end,
  name,
  string,
  integer,
  floating,
  op
};

struct token {
  token_kind kind;
  std::string text;    // the text, name, operator, literal digits, or string value (unescaped)
  std::size_t offset;  // of its first byte in the template source
};

// "line 3, column 7" of a byte offset in source, for messages.
inline std::string position_of(std::string_view source, std::size_t offset) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n')
      ++line, column = 1;
    else
      ++column;
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

[[noreturn]] inline void syntax_error(std::string_view source, std::size_t offset, const std::string& why) {
  fail("chat template", why + " at " + position_of(source, offset),
       "Use the Jinja2 subset that Hugging Face chat templates use (docs/tokenizers.md, \"Chat templates\")");
}

class lexer {
 public:
  explicit lexer(std::string_view source) : source_(source) {}

  std::vector<token> run() {
    while (pos_ < source_.size()) {
      const std::size_t tag = next_tag(pos_);
      std::string_view text = source_.substr(pos_, tag - pos_);
      if (tag == source_.size()) {
        emit_text(text, pos_);
        break;
      }
      const char opener = source_[tag + 1];
      const char modifier = tag + 2 < source_.size() ? source_[tag + 2] : '\0';
      if (modifier == '-')
        text = trim_right(text);
      else if (modifier != '+' && opener != '{')
        text = strip_line_indent(text, pos_);
      emit_text(text, pos_);
      const bool plus = modifier == '+' && opener != '{';  // {{+x}} is a unary plus
      const std::size_t body = tag + 2 + (modifier == '-' || plus ? 1 : 0);
      if (opener == '#')
        skip_comment(tag, body);
      else
        tag_tokens(tag, body, opener == '{');
    }
    return std::move(tokens_);
  }

 private:
  std::string_view source_;
  std::size_t pos_ = 0;
  std::vector<token> tokens_;

  std::size_t next_tag(std::size_t from) const {
    for (std::size_t i = from; i + 1 < source_.size(); ++i)
      if (source_[i] == '{' && (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#'))
        return i;
    return source_.size();
  }
  static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  }
  static std::string_view trim_right(std::string_view s) {
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
  }
  // lstrip_blocks: drops the blanks between the last line start in text and the tag, when only
  // blanks stand there (text starting right after a newline, or at the template's start, counts).
  std::string_view strip_line_indent(std::string_view text, std::size_t text_offset) const {
    const std::size_t newline = text.rfind('\n');
    const std::size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
    const bool at_line_start = line_start > 0 || text_offset == 0 || source_[text_offset - 1] == '\n';
    if (!at_line_start || line_start == text.size()) return text;
    for (std::size_t i = line_start; i < text.size(); ++i)
      if (!is_space(text[i])) return text;
    return text.substr(0, line_start);
  }
  void emit_text(std::string_view text, std::size_t offset) {
    if (!text.empty()) tokens_.push_back({token_kind::text, std::string(text), offset});
  }
  // Moves past the tag's closing delimiter at `end` (`minus` when it is "-%}"-like): strips the
  // whitespace after it, or drops one newline after a block or comment (trim_blocks).
  void close_tag(std::size_t after, bool minus, bool block_or_comment) {
    pos_ = after;
    if (minus)
      while (pos_ < source_.size() && is_space(source_[pos_])) ++pos_;
    else if (block_or_comment && pos_ < source_.size() && source_[pos_] == '\n')
      ++pos_;
  }
  void skip_comment(std::size_t tag, std::size_t body) {
    const std::size_t end = source_.find("#}", body);
    if (end == std::string_view::npos) syntax_error(source_, tag, "comment \"{#\" is never closed by \"#}\"");
    close_tag(end + 2, end > body && source_[end - 1] == '-', true);
  }
  void tag_tokens(std::size_t tag, std::size_t body, bool variable) {
    tokens_.push_back({variable ? token_kind::variable_begin : token_kind::block_begin, "", tag});
    const std::string_view closer = variable ? "}}" : "%}";
    std::size_t p = body;
    int depth = 0;  // open brackets: "}}" inside {{ {'a': {}} }} closes a dict, not the tag
    while (true) {
      while (p < source_.size() && is_space(source_[p])) ++p;
      if (p >= source_.size())
        syntax_error(source_, tag,
                     std::string(variable ? "\"{{\"" : "\"{%\"") + " is never closed by \"" +
                         std::string(closer) + "\"");
      const std::string_view rest = source_.substr(p);
      if (depth == 0 &&
          (rest.starts_with(closer) || (rest[0] == '-' && rest.substr(1).starts_with(closer)))) {
        const bool minus = rest[0] == '-';
        tokens_.push_back({variable ? token_kind::variable_end : token_kind::block_end, "", p});
        close_tag(p + closer.size() + (minus ? 1 : 0), minus, !variable);
        return;
      }
      p = expression_token(p, depth);
    }
  }
  // Reads one name, number, string or operator at p; returns the offset after it.
  std::size_t expression_token(std::size_t p, int& depth) {
    const char c = source_[p];
    const auto is_name_char = [](char x) {
      return (x >= 'a' && x <= 'z') || (x >= 'A' && x <= 'Z') || x == '_' || (x >= '0' && x <= '9');
    };
    if (is_name_char(c) && !(c >= '0' && c <= '9')) {
      std::size_t e = p;
      while (e < source_.size() && is_name_char(source_[e])) ++e;
      tokens_.push_back({token_kind::name, std::string(source_.substr(p, e - p)), p});
      return e;
    }
    if (c >= '0' && c <= '9') return number_token(p);
    if (c == '\'' || c == '"') return string_token(p);
    for (const std::string_view op : {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*", "/", "%", "~", "<",
                                      ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"}) {
      if (!source_.substr(p).starts_with(op)) continue;
      if (op == "(" || op == "[" || op == "{") ++depth;
      if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
      tokens_.push_back({token_kind::op, std::string(op), p});
      return p + op.size();
    }
    syntax_error(source_, p, std::string("unexpected character '") + c + "' in an expression");
  }
  // 42, 4.2, 4e2, 4.2e-1 (the last three are floats), as Jinja2 reads them.
  std::size_t number_token(std::size_t p) {
    std::size_t e = p;
    const auto digit_at = [&](std::size_t i) {
      return i < source_.size() && source_[i] >= '0' && source_[i] <= '9';
    };
    const auto digits = [&] {
      while (digit_at(e)) ++e;
    };
    digits();
    bool floating = false;
    if (e < source_.size() && source_[e] == '.' && digit_at(e + 1)) {
      floating = true;
      ++e;
      digits();
    }
    if (e < source_.size() && (source_[e] == 'e' || source_[e] == 'E')) {
      const std::size_t sign =
          e + 1 < source_.size() && (source_[e + 1] == '+' || source_[e + 1] == '-') ? 1 : 0;
      if (digit_at(e + 1 + sign)) {
        floating = true;
        e += 1 + sign;
        digits();
      }
    }
    tokens_.push_back(
        {floating ? token_kind::floating : token_kind::integer, std::string(source_.substr(p, e - p)), p});
    return e;
  }
  // A quoted string with Python's escapes (Jinja2 decodes them as "unicode-escape" does): \n \t \r
  // \\ \' \" \a \b \f \v, \xhh, \uhhhh, \Uhhhhhhhh, octal \ooo; other escapes are kept as written.
  std::size_t string_token(std::size_t p) {
    const char quote = source_[p];
    std::string value;
    for (std::size_t e = p + 1; e < source_.size(); ++e) {
      const char c = source_[e];
      if (c == quote) {
        tokens_.push_back({token_kind::string, std::move(value), p});
        return e + 1;
      }
      if (c != '\\' || e + 1 >= source_.size()) {
        value += c;
        continue;
      }
      e = escape(e, value);
    }
    syntax_error(source_, p, "string literal is never closed");
  }
  // Appends the escape at source_[backslash] to value; returns the offset of its last character.
  std::size_t escape(std::size_t backslash, std::string& value) const {
    const char kind = source_[backslash + 1];
    constexpr std::string_view simple = "nrtabfv\\'\"", meaning = "\n\r\t\a\b\f\v\\'\"";
    if (const std::size_t i = simple.find(kind); i != std::string_view::npos) {
      value += meaning[i];
      return backslash + 1;
    }
    const auto hex_value = [&](std::size_t from, std::size_t count) -> long {
      if (from + count > source_.size()) return -1;
      long code = 0;
      for (std::size_t i = from; i < from + count; ++i) {
        const char h = source_[i];
        const int d = h >= '0' && h <= '9'   ? h - '0'
                      : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                             : -1;
        if (d < 0) return -1;
        code = code * 16 + d;
      }
      return code;
    };
    const std::size_t count = kind == 'x' ? 2 : kind == 'u' ? 4 : kind == 'U' ? 8 : 0;
    if (count > 0) {
      const long code = hex_value(backslash + 2, count);
      if (code < 0 || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
        syntax_error(source_, backslash, std::string("invalid \\") + kind + " escape in a string literal");
      utf8::append(value, static_cast<char32_t>(code));
      return backslash + 1 + count;
    }
    if (kind >= '0' && kind <= '7') {
      std::size_t end = backslash + 1, code = 0;
      while (end < backslash + 4 && end < source_.size() && source_[end] >= '0' && source_[end] <= '7')
        code = code * 8 + static_cast<std::size_t>(source_[end++] - '0');
      utf8::append(value, static_cast<char32_t>(code));
      return end - 1;
    }
    value += '\\';
    value += kind;
    return backslash + 1;
  }
};

inline std::vector<token> tokenize(std::string_view source) { return lexer(source).run(); }

}  // namespace shardgraph::text::jinja
