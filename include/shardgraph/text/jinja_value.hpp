#pragma once
// Values of the Jinja2 subset that chat templates use (text/chat_template.hpp): Python's None,
// bool, int, float, str, list and dict, Jinja's undefined and namespace(), printed, compared and
// tested for truth as Jinja2 on Python does, so that a template renders byte for byte as
// transformers' apply_chat_template renders it.
//
//   jinja::value v = jinja::list{"a", 1, jinja::value::none()};
//   jinja::to_output(v);   // "['a', 1, None]"   ({{ v }})
//   jinja::to_json(v);     // "[\"a\", 1, null]" ({{ v | tojson }})
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/json.hpp"

namespace shardgraph::text::jinja {

class value;
using list = std::vector<value>;
using dict = std::vector<std::pair<std::string, value>>;  // insertion order, as Python's dict

enum class kind { undefined, none, boolean, integer, floating, string, list, dict, namespace_object };

constexpr std::string_view kind_name(kind k) {
  constexpr std::string_view names[] = {"undefined", "none",   "a boolean", "an integer", "a float",
                                        "a string",  "a list", "a dict",    "a namespace"};
  return names[static_cast<int>(k)];
}

class value {
 public:
  value() = default;  // undefined: a name or key that is not there
  static value none() {
    value v;
    v.data_ = none_tag{};
    return v;
  }
  value(bool b) : data_(b) {}
  value(int i) : data_(std::int64_t{i}) {}
  value(std::int64_t i) : data_(i) {}
  value(double d) : data_(d) {}
  value(std::string s) : data_(std::move(s)) {}
  value(const char* s) : data_(std::string(s)) {}
  value(list l) : data_(std::make_shared<const list>(std::move(l))) {}
  value(dict d) : data_(std::make_shared<const dict>(std::move(d))) {}
  // namespace(): the one mutable value; copies share its attributes, as Python objects do.
  static value make_namespace(dict attributes) {
    value v;
    v.data_ = std::make_shared<dict>(std::move(attributes));
    return v;
  }

  kind type() const { return static_cast<kind>(data_.index()); }
  bool is(kind k) const { return type() == k; }
  bool is_number() const { return is(kind::integer) || is(kind::floating) || is(kind::boolean); }
  bool as_bool() const { return std::get<bool>(data_); }
  std::int64_t as_int() const {  // Python: True is 1
    return is(kind::boolean) ? std::int64_t{as_bool()} : std::get<std::int64_t>(data_);
  }
  double as_double() const {
    return is(kind::floating) ? std::get<double>(data_) : static_cast<double>(as_int());
  }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const list& as_list() const { return *std::get<std::shared_ptr<const list>>(data_); }
  // A dict's or a namespace's entries.
  const dict& as_dict() const {
    if (is(kind::namespace_object)) return *std::get<std::shared_ptr<dict>>(data_);
    return *std::get<std::shared_ptr<const dict>>(data_);
  }
  dict& namespace_attributes() const { return *std::get<std::shared_ptr<dict>>(data_); }

  // The entry under key of a dict or namespace; nullptr when absent or not a mapping.
  const value* find(std::string_view key) const {
    if (!is(kind::dict) && !is(kind::namespace_object)) return nullptr;
    for (const auto& [k, v] : as_dict())
      if (k == key) return &v;
    return nullptr;
  }

 private:
  struct none_tag {};
  std::variant<std::monostate, none_tag, bool, std::int64_t, double, std::string, std::shared_ptr<const list>,
               std::shared_ptr<const dict>, std::shared_ptr<dict>>
      data_;
};

// Python's repr() of a float: the shortest digits that read back to d, in positional notation for
// exponents -4 to 15 and as 1e+16 otherwise; "1.0", not "1".
inline std::string python_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, d, std::chars_format::scientific).ptr;
  const std::string scientific(buffer, end);  // "-1.2345e+02"
  const std::size_t e = scientific.find('e');
  const int exponent = std::atoi(scientific.c_str() + e + 1);
  const bool negative = scientific[0] == '-';
  std::string digits;
  for (std::size_t i = negative ? 1 : 0; i < e; ++i)
    if (scientific[i] != '.') digits += scientific[i];
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exponent_text[16];
    std::snprintf(exponent_text, sizeof exponent_text, "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return out + exponent_text;
  }
  if (exponent < 0) return out + "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
  const auto integer_digits = static_cast<std::size_t>(exponent) + 1;
  if (digits.size() <= integer_digits)
    return out + digits + std::string(integer_digits - digits.size(), '0') + ".0";
  return out + digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
}

// s between quotes, escaped as Python writes it: repr() of a str (json = false; control characters
// as \xNN) or json.dumps with ensure_ascii=False (json = true; \b, \f, \u00NN).
inline std::string quoted(std::string_view s, char quote, bool json) {
  constexpr std::string_view hex = "0123456789abcdef";
  std::string out(1, quote);
  for (const char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == quote || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (json && c == '\b')
      out += "\\b";
    else if (json && c == '\f')
      out += "\\f";
    else if (byte < 0x20 || (!json && byte == 0x7f))
      out += json ? "\\u00" : "\\x", out += hex[byte >> 4], out += hex[byte & 15];
    else
      out += c;
  }
  return out + quote;
}

// Python's repr() of a str: single quotes unless the text holds a single quote and no double one.
inline std::string python_string_repr(std::string_view s) {
  const bool double_quotes = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  return quoted(s, double_quotes ? '"' : '\'', false);
}

std::string to_output(const value& v);

// Python's repr(), which str() of a list or dict uses for its elements.
inline std::string repr(const value& v) {
  if (v.is(kind::string)) return python_string_repr(v.as_string());
  if (v.is(kind::list)) {
    std::string out = "[";
    for (const value& element : v.as_list()) out += (out.size() > 1 ? ", " : "") + repr(element);
    return out + "]";
  }
  if (v.is(kind::dict)) {
    std::string out = "{";
    for (const auto& [key, element] : v.as_dict())
      out += (out.size() > 1 ? ", " : "") + python_string_repr(key) + ": " + repr(element);
    return out + "}";
  }
  return to_output(v);
}

// What {{ v }} prints: Python's str(v); undefined prints nothing.
inline std::string to_output(const value& v) {
  switch (v.type()) {
    case kind::undefined:
      return "";
    case kind::none:
      return "None";
    case kind::boolean:
      return v.as_bool() ? "True" : "False";
    case kind::integer:
      return std::to_string(v.as_int());
    case kind::floating:
      return python_float(v.as_double());
    case kind::string:
      return v.as_string();
    case kind::namespace_object:
      return "<Namespace>";
    default:
      return repr(v);
  }
}

// Python's truth: empty strings, lists and dicts, 0, None and undefined are false.
inline bool truthy(const value& v) {
  switch (v.type()) {
    case kind::undefined:
    case kind::none:
      return false;
    case kind::boolean:
      return v.as_bool();
    case kind::integer:
      return v.as_int() != 0;
    case kind::floating:
      return v.as_double() != 0.0;
    case kind::string:
      return !v.as_string().empty();
    case kind::list:
      return !v.as_list().empty();
    default:
      return !v.as_dict().empty() || v.is(kind::namespace_object);
  }
}

// Python's ==: numbers by value (1 == 1.0 == True), containers element by element.
inline bool equal(const value& a, const value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case kind::undefined:
    case kind::none:
      return true;
    case kind::string:
      return a.as_string() == b.as_string();
    case kind::list: {
      const list &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equal(x[i], y[i])) return false;
      return true;
    }
    case kind::dict: {
      const dict &x = a.as_dict(), &y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [key, element] : x) {
        const value* other = b.find(key);
        if (other == nullptr || !equal(element, *other)) return false;
      }
      return true;
    }
    default:
      return &a.namespace_attributes() == &b.namespace_attributes();
  }
}

// Python's json.dumps(v, ensure_ascii=False, indent=indent) (transformers' tojson filter): indent < 0
// writes one line with ", " and ": " between items.
inline std::string to_json(const value& v, int indent = -1, int depth = 0) {
  const auto line_break = [&](int level) {
    return indent < 0 ? std::string() : "\n" + std::string(static_cast<std::size_t>(indent * level), ' ');
  };
  const std::string separator = indent < 0 ? ", " : ",";
  switch (v.type()) {
    case kind::none:
      return "null";
    case kind::boolean:
      return v.as_bool() ? "true" : "false";
    case kind::integer:
      return std::to_string(v.as_int());
    case kind::floating: {
      const std::string f = python_float(v.as_double());
      return f == "nan" ? "NaN" : f == "inf" ? "Infinity" : f == "-inf" ? "-Infinity" : f;
    }
    case kind::string:
      return quoted(v.as_string(), '"', true);
    case kind::list: {
      if (v.as_list().empty()) return "[]";
      std::string out = "[";
      for (const value& element : v.as_list())
        out +=
            (out.size() > 1 ? separator : "") + line_break(depth + 1) + to_json(element, indent, depth + 1);
      return out + line_break(depth) + "]";
    }
    case kind::dict: {
      if (v.as_dict().empty()) return "{}";
      std::string out = "{";
      for (const auto& [key, element] : v.as_dict())
        out += (out.size() > 1 ? separator : "") + line_break(depth + 1) + quoted(key, '"', true) + ": " +
               to_json(element, indent, depth + 1);
      return out + line_break(depth) + "}";
    }
    default:
      fail("chat template", "tojson cannot write " + std::string(kind_name(v.type())),
           "Pass tojson strings, numbers, booleans, none, lists and dicts only");
  }
}

// A JSON document's value as a template value (objects become dicts, in file order).
inline value from_json(const io::json::value& j) {
  using io::json::kind;
  switch (j.type()) {
    case kind::null:
      return value::none();
    case kind::boolean:
      return j.as_bool();
    case kind::integer:
      return j.as_int();
    case kind::number:
      return j.as_double();
    case kind::string:
      return j.as_string();
    case kind::array: {
      list out;
      for (const io::json::value& element : j.as_array()) out.push_back(from_json(element));
      return out;
    }
    default: {
      dict out;
      for (const auto& [key, element] : j.as_object()) out.emplace_back(key, from_json(element));
      return out;
    }
  }
}

}  // namespace shardgraph::text::jinja
