#pragma once
// What the filters, tests and methods named in text/jinja_builtins.hpp compute, as Jinja2's
// built-ins (with transformers' tojson: json.dumps, non-ASCII kept) and Python's str and dict
// methods do. Each takes its positional arguments in `args` and keyword ones in `keywords`.
#include <span>
#include <string>
#include <string_view>

#include "shardgraph/text/jinja_builtins.hpp"
#include "shardgraph/text/jinja_value.hpp"

namespace shardgraph::text::jinja {

inline value join_filter(const value& input, const value& separator) {
  std::string out;
  bool first = true;
  for (const value& element : elements_of(input, "join")) {
    if (!first) out += to_output(separator);
    out += to_output(element);
    first = false;
  }
  return out;
}

inline value end_element(const value& input, bool first, std::string_view what) {
  const list elements = elements_of(input, what);
  if (elements.empty()) return {};  // Jinja2: undefined
  return first ? elements.front() : elements.back();
}

inline value int_filter(const value& input) {
  if (input.is(kind::floating)) return static_cast<std::int64_t>(input.as_double());
  if (input.is(kind::integer) || input.is(kind::boolean)) return input.as_int();
  if (input.is(kind::string)) {
    try {
      return static_cast<std::int64_t>(std::stoll(strip(input.as_string(), 'b')));
    } catch (const std::exception&) {
    }
  }
  return 0;  // Jinja2's default for what is not a number
}

inline value apply_filter(std::string_view name, const value& input, std::span<const value> args,
                          const keyword_arguments& keywords);
inline bool apply_test(std::string_view name, const value& input, std::span<const value> args);

// select(test, args...) / reject: the elements the test passes (fails); no test: truth.
// selectattr(attribute, test, args...) / rejectattr: the same on each element's attribute.
inline value filter_by_test(std::string_view name, const value& input, std::span<const value> args) {
  const bool by_attribute = name.ends_with("attr"), keep = name.starts_with("select");
  if (by_attribute && args.empty()) problem(std::string(name) + " takes an attribute name");
  const std::size_t test_at = by_attribute ? 1 : 0;
  const value test = test_at < args.size() ? args[test_at] : value::none();
  const std::span<const value> test_args =
      args.size() > test_at + 1 ? args.subspan(test_at + 1) : std::span<const value>();
  list kept;
  for (const value& element : elements_of(input, name)) {
    value tested = element;
    if (by_attribute) {
      const value* found = element.find(expect_string(args[0], name));
      tested = found != nullptr ? *found : value();
    }
    const bool passes =
        test.is(kind::none) ? truthy(tested) : apply_test(expect_string(test, name), tested, test_args);
    if (passes == keep) kept.push_back(element);
  }
  return kept;
}

// map(attribute='name', default=...) or map('filter', args...) over the elements.
inline value map_filter(const value& input, std::span<const value> args, const keyword_arguments& keywords) {
  const value attribute = argument({}, keywords, 0, "attribute", value::none());
  list mapped;
  for (const value& element : elements_of(input, "map")) {
    if (!attribute.is(kind::none)) {
      const value* found = element.find(expect_string(attribute, "map's attribute"));
      mapped.push_back(found != nullptr ? *found : argument({}, keywords, 0, "default"));
    } else {
      if (args.empty()) problem("map takes a filter name or attribute=");
      mapped.push_back(apply_filter(expect_string(args[0], "map"), element, args.subspan(1), {}));
    }
  }
  return mapped;
}

inline value apply_filter(std::string_view name, const value& input, std::span<const value> args,
                          const keyword_arguments& keywords) {
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
    return filter_by_test(name, input, args);
  if (name == "map") return map_filter(input, args, keywords);
  // Jinja2 turns what these filters get into a string first (None: "None", undefined: "").
  const auto text = [&] { return input.is(kind::string) ? input.as_string() : to_output(input); };
  if (name == "trim") {
    const value chars = argument(args, keywords, 0, "chars", value::none());
    if (!chars.is(kind::none)) expect_string(chars, "the filter trim");
    return strip(text(), 'b', chars);
  }
  if (name == "length" || name == "count") return length_of(input);
  if (name == "upper" || name == "lower") return ascii_case(text(), name == "upper");
  if (name == "capitalize") return capitalize(text());
  if (name == "title") return jinja_title(text());
  if (name == "default" || name == "d") {
    const bool use_default =
        truthy(argument(args, keywords, 1, "boolean", false)) ? !truthy(input) : input.is(kind::undefined);
    return use_default ? argument(args, keywords, 0, "default_value", "") : input;
  }
  if (name == "tojson") {
    const value indent = argument(args, keywords, 0, "indent", value::none());
    return to_json(input,
                   indent.is(kind::none) ? -1 : static_cast<int>(expect_int(indent, "tojson's indent")));
  }
  if (name == "join") return join_filter(input, argument(args, keywords, 0, "d", ""));
  if (name == "first" || name == "last") return end_element(input, name == "first", name);
  if (name == "replace")
    return replace(text(), expect_string(argument(args, keywords, 0, "old"), "replace"),
                   expect_string(argument(args, keywords, 1, "new"), "replace"),
                   expect_int(argument(args, keywords, 2, "count", -1), "replace's count"));
  if (name == "items") return input.is(kind::undefined) ? value(list{}) : items_of(input, "the filter items");
  if (name == "string") return to_output(input);
  if (name == "list") return elements_of(input, "the filter list");
  if (name == "reverse") {
    list elements = elements_of(input, "the filter reverse");
    std::reverse(elements.begin(), elements.end());
    if (!input.is(kind::string)) return elements;
    std::string out;
    for (const value& c : elements) out += c.as_string();
    return out;
  }
  if (name == "safe") return input;
  if (name == "int") return int_filter(input);
  if (name == "float") return input.is_number() ? value(input.as_double()) : value(0.0);
  if (name == "abs") {
    if (input.is(kind::floating)) return std::abs(input.as_double());
    const std::int64_t i = expect_int(input, "the filter abs");
    return i < 0 ? -i : i;
  }
  problem("the filter '" + std::string(name) + "' is not implemented");
}

inline bool apply_test(std::string_view name, const value& input, std::span<const value> args) {
  const auto operand = [&] {
    if (args.empty()) problem("the test '" + std::string(name) + "' takes an argument");
    return args[0];
  };
  if (name == "defined") return !input.is(kind::undefined);
  if (name == "undefined") return input.is(kind::undefined);
  if (name == "none") return input.is(kind::none);
  if (name == "string") return input.is(kind::string);
  if (name == "number") return input.is_number();
  if (name == "integer") return input.is(kind::integer);
  if (name == "float") return input.is(kind::floating);
  if (name == "boolean") return input.is(kind::boolean);
  if (name == "true" || name == "false")
    return input.is(kind::boolean) && input.as_bool() == (name == "true");
  if (name == "mapping") return input.is(kind::dict);
  if (name == "iterable" || name == "sequence")
    return input.is(kind::list) || input.is(kind::dict) || input.is(kind::string) ||
           input.is(kind::undefined);
  if (name == "odd" || name == "even")
    return (expect_int(input, "the test " + std::string(name)) % 2 != 0) == (name == "odd");
  if (name == "divisibleby") {
    const std::int64_t divisor = expect_int(operand(), "divisibleby");
    if (divisor == 0) problem("divisibleby(0)");
    return expect_int(input, "divisibleby") % divisor == 0;
  }
  if (name == "eq" || name == "equalto") return equal(input, operand());
  if (name == "ne") return !equal(input, operand());
  problem("the test '" + std::string(name) + "' is not implemented");
}

inline value string_method(std::string_view name, const std::string& s, std::span<const value> args,
                           const keyword_arguments& keywords) {
  const auto affix = [&](bool prefix) {
    const value wanted = argument(args, keywords, 0, prefix ? "prefix" : "suffix");
    const list options = wanted.is(kind::list) ? wanted.as_list() : list{wanted};  // ('a', 'b') tuples
    for (const value& option : options) {
      const std::string& o = expect_string(option, name);
      if (prefix ? s.starts_with(o) : s.ends_with(o)) return true;
    }
    return false;
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const value chars = argument(args, keywords, 0, "chars", value::none());
    if (!chars.is(kind::none)) expect_string(chars, name);
    return strip(s, name[0] == 's' ? 'b' : name[0], chars);
  }
  if (name == "startswith" || name == "endswith") return affix(name == "startswith");
  if (name == "split")
    return split(s, argument(args, keywords, 0, "sep", value::none()),
                 expect_int(argument(args, keywords, 1, "maxsplit", -1), "split's maxsplit"));
  if (name == "upper" || name == "lower") return ascii_case(s, name == "upper");
  if (name == "title") return python_title(s);
  if (name == "capitalize") return capitalize(s);
  if (name == "replace")
    return replace(s, expect_string(argument(args, keywords, 0, "old"), "replace"),
                   expect_string(argument(args, keywords, 1, "new"), "replace"),
                   expect_int(argument(args, keywords, 2, "count", -1), "replace's count"));
  problem("strings have no method ." + std::string(name) + "()");
}

inline value call_method(std::string_view name, const value& object, std::span<const value> args,
                         const keyword_arguments& keywords) {
  if (object.is(kind::string)) return string_method(name, object.as_string(), args, keywords);
  if (object.is(kind::dict)) {
    if (name == "items") return items_of(object, "items()");
    if (name == "keys") return elements_of(object, "keys()");
    if (name == "values") {
      list out;
      for (const auto& [key, element] : object.as_dict()) out.push_back(element);
      return out;
    }
    if (name == "get") {
      const value* found = object.find(expect_string(argument(args, keywords, 0, "key"), "get"));
      return found != nullptr ? *found : argument(args, keywords, 1, "default", value::none());
    }
  }
  problem(std::string(kind_name(object.type())) + " has no method ." + std::string(name) + "()");
}

}  // namespace shardgraph::text::jinja
