#pragma once
// The names of the filters (x | trim), tests (x is defined), functions (namespace(...)) and
// methods (s.startswith('a')) of the Jinja2 subset that chat templates use, which the parser
// checks so that a template using anything else fails when it is read; and the Python string and
// sequence operations they are made of (text/jinja_filters.hpp applies them). A misuse found while
// rendering (a method of the wrong type, a wrong argument) throws evaluation_problem, which the
// evaluator turns into a shardgraph::error naming the template position.
// Limits, against Python: upper / lower / capitalize / title change ASCII letters only.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/text/jinja_value.hpp"

namespace shardgraph::text::jinja {

struct evaluation_problem {
  std::string why;
};
[[noreturn]] inline void problem(std::string why) { throw evaluation_problem{std::move(why)}; }

using keyword_arguments = std::vector<std::pair<std::string, value>>;

inline constexpr std::string_view filter_names[] = {
    "trim",  "length", "count",   "upper",      "lower", "default", "d",      "tojson",     "join",
    "first", "last",   "replace", "capitalize", "title", "items",   "string", "list",       "reverse",
    "safe",  "int",    "float",   "abs",        "map",   "select",  "reject", "selectattr", "rejectattr"};
inline constexpr std::string_view test_names[] = {
    "defined", "undefined",   "none",     "string",   "number", "integer", "float",
    "boolean", "mapping",     "iterable", "sequence", "true",   "false",   "odd",
    "even",    "divisibleby", "eq",       "equalto",  "ne"};
inline constexpr std::string_view function_names[] = {"raise_exception", "namespace", "range",
                                                      "strftime_now"};
inline constexpr std::string_view method_names[] = {
    "strip",   "lstrip", "rstrip",     "startswith", "endswith", "split",  "upper", "lower",
    "replace", "title",  "capitalize", "items",      "keys",     "values", "get"};

template <std::size_t n>
constexpr bool listed(const std::string_view (&names)[n], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}
constexpr bool is_filter(std::string_view name) { return listed(filter_names, name); }
constexpr bool is_test(std::string_view name) { return listed(test_names, name); }
constexpr bool is_function(std::string_view name) { return listed(function_names, name); }
constexpr bool is_method(std::string_view name) { return listed(method_names, name); }

// ---- strings as Python sees them: code points ---------------------------------------------------
inline std::vector<std::string> characters(std::string_view s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = 1;
    while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xc0) == 0x80) ++n;
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}
inline bool is_python_space(std::string_view c) {
  static constexpr std::string_view spaces[] = {" ",
                                                "\t",
                                                "\n",
                                                "\r",
                                                "\v",
                                                "\f",
                                                "\x1c",
                                                "\x1d",
                                                "\x1e",
                                                "\x1f",
                                                "\xc2\x85",
                                                "\xc2\xa0",
                                                "\xe1\x9a\x80",
                                                "\xe2\x80\xa8",
                                                "\xe2\x80\xa9",
                                                "\xe2\x80\xaf",
                                                "\xe2\x81\x9f",
                                                "\xe3\x80\x80"};
  if (listed(spaces, c)) return true;
  return c.size() == 3 && c[0] == '\xe2' && c[1] == '\x80' &&
         static_cast<unsigned char>(c[2]) <= 0x8a;  // U+2000-200A
}
// str.strip([chars]) (which = 'b'oth, 'l'eft, 'r'ight); chars absent (none): whitespace.
inline std::string strip(std::string_view s, char which, const value& chars = value::none()) {
  const std::vector<std::string> set =
      chars.is(kind::string) ? characters(chars.as_string()) : std::vector<std::string>{};
  const auto strippable = [&](std::string_view c) {
    return chars.is(kind::string) ? std::find(set.begin(), set.end(), c) != set.end() : is_python_space(c);
  };
  const auto continuation = [&](std::size_t i) { return (static_cast<unsigned char>(s[i]) & 0xc0) == 0x80; };
  std::size_t begin = 0, end = s.size();
  while (which != 'r' && begin < end) {
    std::size_t next = begin + 1;
    while (next < end && continuation(next)) ++next;
    if (!strippable(s.substr(begin, next - begin))) break;
    begin = next;
  }
  while (which != 'l' && end > begin) {
    std::size_t last = end - 1;
    while (last > begin && continuation(last)) --last;
    if (!strippable(s.substr(last, end - last))) break;
    end = last;
  }
  return std::string(s.substr(begin, end - begin));
}
inline std::string ascii_case(std::string s, bool upper) {
  for (char& c : s)
    if (upper ? (c >= 'a' && c <= 'z') : (c >= 'A' && c <= 'Z')) c = static_cast<char>(c ^ 0x20);
  return s;
}
inline std::string capitalize(const std::string& s) {
  std::string out = ascii_case(s, false);
  if (!out.empty()) out[0] = ascii_case(out.substr(0, 1), true)[0];
  return out;
}
// str.title(): a letter after a letter is lowered, any other letter raised ("they'Re", "d2E").
inline std::string python_title(const std::string& s) {
  std::string out;
  bool after_letter = false;
  for (const char c : s) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    out += letter ? ascii_case(std::string(1, c), !after_letter)[0] : c;
    after_letter = letter;
  }
  return out;
}
// Jinja2's title filter: words start after whitespace, '-', '(', '{', '[' or '<'; each is its
// first character raised and the rest lowered ("They're", "A-B_c D2e").
inline std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (const char c : s) {
    const bool separator = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
                           c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    out += separator ? c : ascii_case(std::string(1, c), word_start)[0];
    word_start = separator;
  }
  return out;
}
// str.replace(old, new[, count]); count < 0: all.
inline std::string replace(const std::string& s, const std::string& old, const std::string& replacement,
                           std::int64_t count) {
  if (old.empty()) problem("replace() of an empty string is not supported");
  std::string out;
  std::size_t from = 0;
  for (std::int64_t done = 0; count < 0 || done < count; ++done) {
    const std::size_t at = s.find(old, from);
    if (at == std::string::npos) break;
    out += s.substr(from, at - from) + replacement;
    from = at + old.size();
  }
  return out + s.substr(from);
}
// str.split([sep[, maxsplit]]); no sep: runs of whitespace, no empty pieces.
inline list split(const std::string& s, const value& separator, std::int64_t max_splits) {
  if (!separator.is(kind::string)) {
    if (max_splits >= 0) problem("split() without a separator takes no maxsplit here");
    list out;
    std::string piece;
    for (const std::string& c : characters(s)) {
      if (!is_python_space(c)) {
        piece += c;
      } else if (!piece.empty()) {
        out.push_back(std::move(piece));
        piece.clear();
      }
    }
    if (!piece.empty()) out.push_back(std::move(piece));
    return out;
  }
  list out;
  const std::string& sep = separator.as_string();
  if (sep.empty()) problem("split() got an empty separator");
  std::size_t from = 0;
  for (std::size_t at; (max_splits < 0 || static_cast<std::int64_t>(out.size()) < max_splits) &&
                       (at = s.find(sep, from)) != std::string::npos;
       from = at + sep.size())
    out.push_back(s.substr(from, at - from));
  out.push_back(s.substr(from));
  return out;
}

// ---- argument access -----------------------------------------------------------------------------
// The argument at `index` or under `keyword`, or `fallback` when neither is given.
inline value argument(std::span<const value> args, const keyword_arguments& keywords, std::size_t index,
                      std::string_view keyword, value fallback = {}) {
  if (index < args.size()) return args[index];
  for (const auto& [name, v] : keywords)
    if (name == keyword) return v;
  return fallback;
}
inline const std::string& expect_string(const value& v, std::string_view what) {
  if (!v.is(kind::string))
    problem(std::string(what) + " takes a string, not " + std::string(kind_name(v.type())));
  return v.as_string();
}
inline std::int64_t expect_int(const value& v, std::string_view what) {
  if (!v.is(kind::integer) && !v.is(kind::boolean))
    problem(std::string(what) + " takes an integer, not " + std::string(kind_name(v.type())));
  return v.as_int();
}

// items() of a dict (or a namespace): a list of [key, value] pairs.
inline value items_of(const value& mapping, std::string_view what) {
  if (!mapping.is(kind::dict) && !mapping.is(kind::namespace_object))
    problem(std::string(what) + " needs a dict, not " + std::string(kind_name(mapping.type())));
  list out;
  for (const auto& [key, element] : mapping.as_dict()) out.push_back(list{key, element});
  return out;
}

// The elements a for loop, `in`, join, first or last see: a list's, a dict's keys, a string's
// characters; undefined has none.
inline list elements_of(const value& v, std::string_view what) {
  switch (v.type()) {
    case kind::undefined:
      return {};
    case kind::list:
      return v.as_list();
    case kind::string: {
      list out;
      for (std::string& c : characters(v.as_string())) out.emplace_back(std::move(c));
      return out;
    }
    case kind::dict: {
      list out;
      for (const auto& [key, element] : v.as_dict()) out.emplace_back(key);
      return out;
    }
    default:
      problem(std::string(what) + " needs a list, dict or string, not " + std::string(kind_name(v.type())));
  }
}

inline std::int64_t length_of(const value& v) {
  if (v.is(kind::string)) return static_cast<std::int64_t>(characters(v.as_string()).size());
  if (v.is(kind::dict)) return static_cast<std::int64_t>(v.as_dict().size());
  return static_cast<std::int64_t>(elements_of(v, "length").size());
}

}  // namespace shardgraph::text::jinja
