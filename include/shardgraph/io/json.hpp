#pragma once
// A strict JSON (RFC 8259) reader for the files shardgraph takes from outside: safetensors headers
// and Hugging Face config.json. Strict means: UTF-8 only, no comments, no trailing commas, no
// duplicate keys, no lone surrogates, nothing after the top-level value but whitespace.
// Any input either parses or throws shardgraph::error giving the byte offset; nesting and size are
// bounded (parse_limits), so no input can exhaust the stack or memory.
//
//   auto config = json::parse(R"({"n_embd": 768, "activation": "gelu_new"})", "config.json");
//   config.at("n_embd").as_int();        // 768
//   config.at("n_head").as_int();        // throws: shardgraph: json: key "n_head" is missing. ...
//   config.at("activation").as_int();    // throws: ... "activation" is a string, not an integer. ...
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "shardgraph/core/error.hpp"

namespace shardgraph::io::json {

enum class kind { null, boolean, integer, number, string, array, object };  // number: not an integer

constexpr std::string_view kind_name(kind k) {
  constexpr std::string_view names[] = {"null",     "a boolean", "an integer", "a non-integer number",
                                        "a string", "an array",  "an object"};
  return names[static_cast<int>(k)];
}

class value;
using array = std::vector<value>;
using object = std::vector<std::pair<std::string, value>>;  // in file order; keys are unique

class value {
 public:
  value() = default;  // null

  kind type() const { return static_cast<kind>(data_.index()); }
  // The key (or key[index]) this value was found under, for messages; empty for the top level.
  const std::string& name() const { return name_; }

  bool is_null() const { return type() == kind::null; }
  bool as_bool() const { return get<bool>(kind::boolean); }
  std::int64_t as_int() const { return get<std::int64_t>(kind::integer); }  // 2.0 is not an integer
  double as_double() const {                                                // any number
    return type() == kind::integer ? static_cast<double>(as_int()) : get<double>(kind::number);
  }
  const std::string& as_string() const { return get<std::string>(kind::string); }
  const array& as_array() const { return get<array>(kind::array); }
  const object& as_object() const { return get<object>(kind::object); }

  const value* find(std::string_view key) const {  // nullptr when absent
    for (const auto& [k, v] : as_object())
      if (k == key) return &v;
    return nullptr;
  }
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  const value& at(std::string_view key) const {
    if (const value* v = find(key)) return *v;
    fail("json",
         "key \"" + std::string(key) + "\" is missing" + (name_.empty() ? "" : " from \"" + name_ + "\""),
         "Add it to the file, or check its spelling against the format");
  }
  const value& at(std::size_t index) const {
    const array& a = as_array();
    if (index < a.size()) return a[index];
    fail("json",
         described() + " has " + std::to_string(a.size()) + " elements, no element " + std::to_string(index),
         "Check the array's length in the file");
  }

 private:
  friend class parser;
  std::variant<std::monostate, bool, std::int64_t, double, std::string, array, object> data_;
  std::string name_;

  std::string described() const { return name_.empty() ? "the top-level value" : "\"" + name_ + "\""; }
  template <class T>
  const T& get(kind wanted) const {
    if (const T* p = std::get_if<T>(&data_)) return *p;
    fail("json",
         described() + " is " + std::string(kind_name(type())) + ", not " + std::string(kind_name(wanted)),
         "Check the file against its format");
  }
};

struct parse_limits {
  std::size_t max_depth = 64;           // nested arrays and objects
  std::size_t max_bytes = 100'000'000;  // the safetensors header limit
  std::size_t max_values = 4'000'000;   // bounds memory: about 100 bytes per value
  std::size_t first_byte_offset = 0;    // added to the offsets in messages (a header inside a file)
};

// What a UTF-8 lead byte announces (RFC 3629: no overlongs, no surrogates, at most U+10FFFF):
// the sequence's length (0: the byte cannot lead one) and the allowed range of its second byte.
struct utf8_lead {
  std::size_t length = 0;
  unsigned second_low = 0x80, second_high = 0xbf;
};
constexpr utf8_lead utf8_lead_of(unsigned lead) {
  if (lead < 0x80) return {1};
  if (lead >= 0xc2 && lead <= 0xdf) return {2};
  if (lead >= 0xe0 && lead <= 0xef) return {3, lead == 0xe0 ? 0xa0u : 0x80u, lead == 0xed ? 0x9fu : 0xbfu};
  if (lead >= 0xf0 && lead <= 0xf4) return {4, lead == 0xf0 ? 0x90u : 0x80u, lead == 0xf4 ? 0x8fu : 0xbfu};
  return {0};
}

// Length of the well-formed UTF-8 sequence at s[pos], or 0 when it is not one.
constexpr std::size_t utf8_sequence_length(std::string_view s, std::size_t pos) {
  const auto byte = [&](std::size_t i) {
    return pos + i < s.size() ? static_cast<unsigned char>(s[pos + i]) : 0u;
  };
  const auto [length, low, high] = utf8_lead_of(byte(0));
  if (length <= 1) return length;
  if (byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  return length;
}

constexpr bool is_valid_utf8(std::string_view s) {
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t n = utf8_sequence_length(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

// s as a JSON string literal, quotes included. Contract: s is valid UTF-8 (is_valid_utf8).
inline std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (u < 0x20)
      out += "\\u00", out += "0123456789abcdef"[u >> 4], out += "0123456789abcdef"[u & 15];
    else
      out += c;
  }
  return out + '"';
}

class parser {
 public:
  parser(std::string_view text, std::string_view source, const parse_limits& limits)
      : text_(text), source_(source), limits_(limits) {}

  value parse_document() {
    if (text_.size() > limits_.max_bytes)
      fail(source_,
           "JSON text of " + std::to_string(text_.size()) + " bytes is over the limit of " +
               std::to_string(limits_.max_bytes) + " bytes",
           "Check that this is the file you meant; the format does not allow it to be this large");
    value root = parse_value("", 0);
    skip_whitespace();
    if (pos_ != text_.size()) error("unexpected " + found() + " after the end of the top-level value");
    return root;
  }

 private:
  std::string_view text_, source_;
  parse_limits limits_;
  std::size_t pos_ = 0, values_ = 0;

  [[noreturn]] void error_at(std::size_t offset, const std::string& why) const {
    fail(source_, "invalid JSON at byte " + std::to_string(limits_.first_byte_offset + offset) + ": " + why,
         "Check that the file is complete and of the expected kind");
  }
  [[noreturn]] void error(const std::string& why) const { error_at(pos_, why); }
  std::string found_at(std::size_t offset) const {  // the byte at offset, printable
    if (offset >= text_.size()) return "end of input";
    const auto c = static_cast<unsigned char>(text_[offset]);
    if (c >= 0x20 && c < 0x7f) return std::string("'") + text_[offset] + "'";
    return "byte 0x" + hex(c).substr(2);
  }
  std::string found() const { return found_at(pos_); }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  void skip_whitespace() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }
  void expect(char c, const char* context) {
    skip_whitespace();
    if (peek() != c) error(std::string("expected '") + c + "' " + context + ", found " + found());
    ++pos_;
  }
  bool consume_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  // Keys and numbers are cut to this length in names and messages, which keeps the storage of
  // names linear in the input and messages readable.
  static std::string shorten(std::string_view s) {
    return s.size() <= 96 ? std::string(s) : std::string(s.substr(0, 96)) + "...";
  }

  value parse_value(std::string name, std::size_t depth) {
    skip_whitespace();
    if (++values_ > limits_.max_values)
      error("more than " + std::to_string(limits_.max_values) + " values (the limit)");
    value v;
    v.name_ = std::move(name);
    const char c = peek();
    if (c == '{' || c == '[') {
      if (depth >= limits_.max_depth)
        error("nesting deeper than " + std::to_string(limits_.max_depth) + " levels");
      if (c == '{')
        v.data_ = parse_object(v.name_, depth + 1);
      else
        v.data_ = parse_array(v.name_, depth + 1);
    } else if (c == '"')
      v.data_ = parse_string();
    else if (c == '-' || (c >= '0' && c <= '9'))
      parse_number(v);
    else if (consume_literal("true"))
      v.data_ = true;
    else if (consume_literal("false"))
      v.data_ = false;
    else if (!consume_literal("null"))
      error("expected a value, found " + found());
    return v;
  }

  object parse_object(const std::string& name, std::size_t depth) {
    ++pos_;
    object members;
    skip_whitespace();
    if (peek() != '}') {
      for (;;) {
        skip_whitespace();
        if (peek() != '"') error("expected a string key, found " + found());
        std::string key = parse_string();
        expect(':', "after an object key");
        value member = parse_value(shorten(key), depth);
        members.emplace_back(std::move(key), std::move(member));
        skip_whitespace();
        if (peek() == '}') break;
        expect(',', "or '}' after an object member");
      }
    }
    ++pos_;
    std::vector<std::string_view> keys;
    for (const auto& m : members) keys.push_back(m.first);
    std::sort(keys.begin(), keys.end());
    if (const auto d = std::adjacent_find(keys.begin(), keys.end()); d != keys.end())
      error_at(pos_ - 1, "duplicate key \"" + shorten(*d) + "\" in the object " +
                             (name.empty() ? "" : "\"" + name + "\" ") + "that ends here");
    return members;
  }

  array parse_array(const std::string& name, std::size_t depth) {
    ++pos_;
    array elements;
    skip_whitespace();
    if (peek() != ']') {
      for (;;) {
        elements.push_back(parse_value(shorten(name) + "[" + std::to_string(elements.size()) + "]", depth));
        skip_whitespace();
        if (peek() == ']') break;
        expect(',', "or ']' after an array element");
      }
    }
    ++pos_;
    return elements;
  }

  unsigned parse_hex4() {
    unsigned code = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const char c = peek();
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) error("expected four hex digits after \\u, found " + found());
      code = code * 16 + static_cast<unsigned>(digit);
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    const auto put = [&](unsigned b) { out += static_cast<char>(b); };
    if (code < 0x80)
      put(code);
    else if (code < 0x800)
      put(0xc0 | (code >> 6)), put(0x80 | (code & 0x3f));
    else if (code < 0x10000)
      put(0xe0 | (code >> 12)), put(0x80 | ((code >> 6) & 0x3f)), put(0x80 | (code & 0x3f));
    else
      put(0xf0 | (code >> 18)), put(0x80 | ((code >> 12) & 0x3f)), put(0x80 | ((code >> 6) & 0x3f)),
          put(0x80 | (code & 0x3f));
  }

  std::string parse_string() {
    ++pos_;
    std::string out;
    for (;;) {
      if (at_end()) error("unterminated string");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) error("control character " + found() + " inside a string (it must be escaped)");
      if (c != '\\') {
        const std::size_t n = utf8_sequence_length(text_, pos_);
        if (n == 0) error("invalid UTF-8 " + found() + " inside a string");
        out.append(text_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      ++pos_;
      if (at_end()) error("unterminated string");
      constexpr std::string_view escaped = "\"\\/bfnrt", meaning = "\"\\/\b\f\n\r\t";
      const char e = text_[pos_++];
      if (const std::size_t k = escaped.find(e); k != std::string_view::npos) {
        out += meaning[k];
        continue;
      }
      if (e != 'u')
        error_at(pos_ - 1, "unknown escape in a string: backslash followed by " + found_at(pos_ - 1));
      unsigned code = parse_hex4();
      if (code >= 0xdc00 && code <= 0xdfff) error_at(pos_ - 6, "lone low surrogate \\u" + hex(code));
      if (code >= 0xd800 && code <= 0xdbff) {
        if (!consume_literal("\\u"))
          error("high surrogate \\u" + hex(code) + " not followed by a low surrogate");
        const unsigned low = parse_hex4();
        if (low < 0xdc00 || low > 0xdfff)
          error_at(pos_ - 6, "high surrogate \\u" + hex(code) + " followed by \\u" + hex(low) +
                                 ", not by a low surrogate");
        code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
      }
      append_utf8(out, code);
    }
  }
  static std::string hex(unsigned code) {
    std::string s(4, '0');
    for (std::size_t i = 4; i-- > 0; code >>= 4) s[i] = "0123456789abcdef"[code & 15];
    return s;
  }

  void parse_number(value& v) {
    const std::size_t start = pos_;
    const auto digits = [&] {
      if (!(peek() >= '0' && peek() <= '9')) error("expected a digit in a number, found " + found());
      while (peek() >= '0' && peek() <= '9') ++pos_;
    };
    bool integral = true;
    if (peek() == '-') ++pos_;
    if (peek() == '0')
      ++pos_;
    else
      digits();
    if (peek() == '.') {
      ++pos_;
      digits();
      integral = false;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits();
      integral = false;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      std::int64_t i = 0;
      if (std::from_chars(first, last, i).ec == std::errc{}) return void(v.data_ = i);
    }
    double d = 0;  // also integers beyond int64, as JSON readers do
    if (std::from_chars(first, last, d).ec != std::errc{})
      error_at(start, "number " + shorten({first, last}) + " is outside the range of a double");
    v.data_ = d;
  }
};

// Parses one JSON document. `source` names it in messages (a file name).
inline value parse(std::string_view text, std::string_view source = "json", const parse_limits& limits = {}) {
  return parser(text, source, limits).parse_document();
}

}  // namespace shardgraph::io::json
