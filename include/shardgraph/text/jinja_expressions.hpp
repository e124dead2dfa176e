#pragma once
// Evaluates the expressions of a parsed template (text/jinja_syntax.hpp) against the variables in
// scope, with Python's arithmetic (int + int is an int, / always a float, // and % floor), Jinja2's
// lookups (message.role and message['role'] alike; a missing key is undefined) and Python's
// indexing and slicing (xs[-1], xs[1:], s[::-1]).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "shardgraph/text/jinja_filters.hpp"
#include "shardgraph/text/jinja_lexer.hpp"
#include "shardgraph/text/jinja_syntax.hpp"

namespace shardgraph::text::jinja {

using variables = std::unordered_map<std::string, value>;

// The value of name in the innermost scope that has it (scopes: outermost first), or undefined.
inline value lookup_variable(const std::vector<variables>& scopes, const std::string& name) {
  for (auto scope = scopes.rbegin(); scope != scopes.rend(); ++scope)
    if (const auto found = scope->find(name); found != scope->end()) return found->second;
  return {};
}

// Renders a call of a template's {% macro %} (text/jinja_evaluator.hpp), given its arguments.
using macro_caller = std::function<value(const expression& call, list args, keyword_arguments keywords)>;

class expression_evaluator {
 public:
  expression_evaluator(std::string_view source, const std::vector<variables>& scopes, macro_caller call_macro)
      : source_(source), scopes_(scopes), call_macro_(std::move(call_macro)) {}

  value evaluate(const expression& e) {
    using form = expression::form;
    switch (e.kind) {
      case form::literal:
        return e.literal;
      case form::variable:
        return lookup_variable(scopes_, e.name);
      case form::list_display: {
        list elements;
        for (const expression_ptr& operand : e.operands) elements.push_back(evaluate(*operand));
        return elements;
      }
      case form::dict_display:
        return evaluate_dict(e);
      case form::attribute:
        return member(e, evaluate(*e.operands[0]), e.name);
      case form::subscript:
        return member(e, evaluate(*e.operands[0]), evaluate(*e.operands[1]));
      case form::slice:
        return slice(e, evaluate(*e.operands[0]));
      case form::call:
        return call_function(e);
      case form::macro_call: {
        list args;
        for (const expression_ptr& operand : e.operands) args.push_back(evaluate(*operand));
        keyword_arguments keywords;
        for (const auto& [name, operand] : e.keywords) keywords.emplace_back(name, evaluate(*operand));
        return call_macro_(e, std::move(args), std::move(keywords));
      }
      case form::unary:
        return evaluate_unary(e);
      case form::binary:
        return evaluate_binary(e);
      case form::conditional:
        if (truthy(evaluate(*e.operands[1]))) return evaluate(*e.operands[0]);
        return e.operands[2] == nullptr ? value() : evaluate(*e.operands[2]);
      default:
        return call_builtin(e);
    }
  }

 private:
  std::string_view source_;
  const std::vector<variables>& scopes_;
  macro_caller call_macro_;

  [[noreturn]] void error_at(const expression& e, const std::string& why) const {
    fail("chat template", why + " at " + position_of(source_, e.offset),
         "Check the template against the conversation it was given (roles, fields, types)");
  }
  static std::string spelled(const expression& e) {  // for messages: message.role, messages[0], ...
    using form = expression::form;
    if (e.kind == form::variable) return e.name;
    if (e.kind == form::attribute) return spelled(*e.operands[0]) + "." + e.name;
    if (e.kind == form::subscript && e.operands[1]->kind == form::literal)
      return spelled(*e.operands[0]) + "[" + repr(e.operands[1]->literal) + "]";
    return "the value";
  }

  value evaluate_dict(const expression& e) {
    dict entries;
    for (std::size_t i = 0; i < e.operands.size(); i += 2) {
      const value key = evaluate(*e.operands[i]);
      if (!key.is(kind::string))
        error_at(*e.operands[i], "dict keys must be strings here, not " + std::string(kind_name(key.type())));
      entries.emplace_back(key.as_string(), evaluate(*e.operands[i + 1]));
    }
    return entries;
  }

  // object.key or object[key].
  value member(const expression& e, const value& object, const value& key) {
    if (object.is(kind::undefined))
      error_at(e, spelled(*e.operands[0]) + " is undefined, so it has no " +
                      (key.is(kind::string) ? "'" + key.as_string() + "'" : to_output(key)));
    if (key.is(kind::string)) {
      if (const value* found = object.find(key.as_string())) return *found;
      return {};
    }
    if (!key.is(kind::integer) || !(object.is(kind::list) || object.is(kind::string))) return {};
    const list characters = object.is(kind::string) ? elements_of(object, "indexing") : list();
    const list& elements = object.is(kind::list) ? object.as_list() : characters;  // no copy of a list
    std::int64_t index = key.as_int();
    if (index < 0) index += static_cast<std::int64_t>(elements.size());
    if (index < 0 || index >= static_cast<std::int64_t>(elements.size())) return {};
    return elements[static_cast<std::size_t>(index)];
  }

  // Python's slice of a list or string: start, stop, step (omitted: None).
  value slice(const expression& e, const value& object) {
    if (!object.is(kind::list) && !object.is(kind::string))
      error_at(e, "cannot slice " + std::string(kind_name(object.type())));
    const list elements = elements_of(object, "slicing");
    const auto n = static_cast<std::int64_t>(elements.size());
    const auto bound = [&](std::size_t operand, std::int64_t fallback) -> std::int64_t {
      const value v = e.operands[operand] == nullptr ? value::none() : evaluate(*e.operands[operand]);
      if (v.is(kind::none)) return fallback;
      if (!v.is(kind::integer))
        error_at(e, "slice bounds must be integers, not " + std::string(kind_name(v.type())));
      return v.as_int();
    };
    const std::int64_t step = bound(3, 1);
    if (step == 0) error_at(e, "slice step cannot be zero");
    const auto adjust = [&](std::int64_t i) {  // CPython's PySlice_AdjustIndices
      if (i < 0) i += n;
      if (i < 0) return step < 0 ? std::int64_t{-1} : std::int64_t{0};
      if (i >= n) return step < 0 ? n - 1 : n;
      return i;
    };
    const std::int64_t start = adjust(bound(1, step > 0 ? 0 : n - 1));
    const std::int64_t stop = e.operands[2] == nullptr ? (step > 0 ? n : -1) : adjust(bound(2, 0));
    list picked;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      picked.push_back(elements[static_cast<std::size_t>(i)]);
    if (object.is(kind::list)) return picked;
    std::string out;
    for (const value& c : picked) out += c.as_string();
    return out;
  }

  value call_function(const expression& e) {
    std::vector<value> args;
    for (const expression_ptr& operand : e.operands) args.push_back(evaluate(*operand));
    if (e.name == "raise_exception") {
      const std::string message = args.empty() ? std::string() : to_output(args[0]);
      fail("chat template",
           "the template raised an exception: " + message + " (at " + position_of(source_, e.offset) + ")",
           "The conversation breaks a rule of this model's chat template: change it as the message says");
    }
    if (e.name == "namespace") {
      dict attributes;
      for (const value& positional : args) {
        if (!positional.is(kind::dict)) error_at(e, "namespace() takes a dict or keyword arguments");
        attributes.insert(attributes.end(), positional.as_dict().begin(), positional.as_dict().end());
      }
      for (const auto& [name, operand] : e.keywords) attributes.emplace_back(name, evaluate(*operand));
      return value::make_namespace(std::move(attributes));
    }
    if (e.name == "strftime_now") return strftime_now(e, args);
    return range(e, args);
  }
  // The local time now, formatted by strftime (transformers: datetime.now().strftime(format)).
  value strftime_now(const expression& e, const std::vector<value>& args) {
    if (args.size() != 1 || !args[0].is(kind::string)) error_at(e, "strftime_now() takes one format string");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char text[256];
    const std::size_t n = std::strftime(text, sizeof text, args[0].as_string().c_str(), &local);
    if (n == 0 && !args[0].as_string().empty())
      error_at(e, "strftime_now() formats to nothing or to over 255 bytes");
    return std::string(text, n);
  }
  value range(const expression& e, const std::vector<value>& args) {
    if (args.empty() || args.size() > 3 ||
        !std::all_of(args.begin(), args.end(), [](const value& a) { return a.is(kind::integer); }))
      error_at(e, "range() takes one to three integers");
    const std::int64_t start = args.size() == 1 ? 0 : args[0].as_int();
    const std::int64_t stop = args.size() == 1 ? args[0].as_int() : args[1].as_int();
    const std::int64_t step = args.size() == 3 ? args[2].as_int() : 1;
    if (step == 0) error_at(e, "range() step cannot be zero");
    list out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 1'000'000) error_at(e, "range() of more than a million numbers");
      out.push_back(i);
    }
    return out;
  }

  // Filters, tests and methods (text/jinja_filters.hpp).
  value call_builtin(const expression& e) {
    const value object = evaluate(*e.operands[0]);
    std::vector<value> args;
    for (std::size_t i = 1; i < e.operands.size(); ++i) args.push_back(evaluate(*e.operands[i]));
    keyword_arguments keywords;
    for (const auto& [name, operand] : e.keywords) keywords.emplace_back(name, evaluate(*operand));
    try {
      if (e.kind == expression::form::filter) return apply_filter(e.name, object, args, keywords);
      if (e.kind == expression::form::test) return apply_test(e.name, object, args) != e.negated;
      if (object.is(kind::undefined))
        error_at(e, spelled(*e.operands[0]) + " is undefined, so it has no ." + e.name + "()");
      return call_method(e.name, object, args, keywords);
    } catch (const evaluation_problem& p) {
      error_at(e, p.why);
    }
  }

  value evaluate_unary(const expression& e) {
    const value operand = evaluate(*e.operands[0]);
    if (e.name == "not") return !truthy(operand);
    if (!operand.is_number())
      error_at(e, "unary " + e.name + " needs a number, not " + std::string(kind_name(operand.type())));
    if (e.name == "+") return operand.is(kind::floating) ? operand : value(operand.as_int());
    return operand.is(kind::floating) ? value(-operand.as_double()) : value(-operand.as_int());
  }

  value evaluate_binary(const expression& e) {
    const std::string& op = e.name;
    const value left = evaluate(*e.operands[0]);
    if (op == "and") return truthy(left) ? evaluate(*e.operands[1]) : left;
    if (op == "or") return truthy(left) ? left : evaluate(*e.operands[1]);
    const value right = evaluate(*e.operands[1]);
    if (op == "==") return equal(left, right);
    if (op == "!=") return !equal(left, right);
    if (op == "in" || op == "not in") return contains(e, left, right) == (op == "in");
    if (op == "<" || op == "<=" || op == ">" || op == ">=") return compare(e, left, right);
    if (op == "~") return to_output(left) + to_output(right);
    return arithmetic(e, left, right);
  }
  bool contains(const expression& e, const value& needle, const value& haystack) {
    if (haystack.is(kind::string)) {
      if (!needle.is(kind::string))
        error_at(e, "'in <string>' needs a string on its left, not " + std::string(kind_name(needle.type())));
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    }
    if (!haystack.is(kind::list) && !haystack.is(kind::dict) && !haystack.is(kind::undefined))
      error_at(e, "'in' needs a list, dict or string on its right, not " +
                      std::string(kind_name(haystack.type())));
    const list elements = haystack.is(kind::list) ? haystack.as_list() : elements_of(haystack, "in");
    return std::any_of(elements.begin(), elements.end(), [&](const value& v) { return equal(needle, v); });
  }
  bool compare(const expression& e, const value& a, const value& b) {
    int order = 0;
    if (a.is_number() && b.is_number())
      order = a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
    else if (a.is(kind::string) && b.is(kind::string))
      order = a.as_string().compare(b.as_string());
    else
      error_at(e, "cannot compare " + std::string(kind_name(a.type())) + " with " +
                      std::string(kind_name(b.type())) + " by " + e.name);
    if (e.name == "<") return order < 0;
    if (e.name == "<=") return order <= 0;
    if (e.name == ">") return order > 0;
    return order >= 0;
  }
  value repeat(const expression& e, const value& sequence, std::int64_t times) {
    const std::size_t size =
        sequence.is(kind::string) ? sequence.as_string().size() : sequence.as_list().size();
    if (times > 0 && size * static_cast<std::size_t>(times) > (std::size_t{1} << 26))
      error_at(e, "repetition too large");
    if (sequence.is(kind::string)) {
      std::string out;
      for (std::int64_t i = 0; i < times; ++i) out += sequence.as_string();
      return out;
    }
    list out;
    for (std::int64_t i = 0; i < times; ++i)
      out.insert(out.end(), sequence.as_list().begin(), sequence.as_list().end());
    return out;
  }
  value arithmetic(const expression& e, const value& a, const value& b) {
    const std::string& op = e.name;
    if (op == "+" && a.is(kind::string) && b.is(kind::string)) return a.as_string() + b.as_string();
    if (op == "+" && a.is(kind::list) && b.is(kind::list)) {
      list joined = a.as_list();
      joined.insert(joined.end(), b.as_list().begin(), b.as_list().end());
      return joined;
    }
    if (op == "*" && (a.is(kind::string) || a.is(kind::list)) && b.is(kind::integer))
      return repeat(e, a, b.as_int());
    if (op == "*" && (b.is(kind::string) || b.is(kind::list)) && a.is(kind::integer))
      return repeat(e, b, a.as_int());
    if (!a.is_number() || !b.is_number())
      error_at(e, "cannot apply " + op + " to " + std::string(kind_name(a.type())) + " and " +
                      std::string(kind_name(b.type())));
    const bool integers = !a.is(kind::floating) && !b.is(kind::floating);
    const double x = a.as_double(), y = b.as_double();
    if ((op == "/" || op == "//" || op == "%") && y == 0) error_at(e, "division by zero");
    if (op == "/") return x / y;
    if (integers && op != "**") {
      const std::int64_t i = a.as_int(), j = b.as_int();
      if (op == "+") return i + j;
      if (op == "-") return i - j;
      if (op == "*") return i * j;
      const std::int64_t quotient = i / j - ((i % j != 0 && (i < 0) != (j < 0)) ? 1 : 0);
      return op == "//" ? quotient : i - quotient * j;
    }
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (op == "//") return std::floor(x / y);
    if (op == "%") return x - std::floor(x / y) * y;
    if (integers && b.as_int() >= 0) return static_cast<std::int64_t>(std::llround(std::pow(x, y)));
    return std::pow(x, y);
  }
};

}  // namespace shardgraph::text::jinja
