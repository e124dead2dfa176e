#pragma once
// Renders a parsed template (text/jinja_parser.hpp) with a set of variables, as Jinja2 does:
// a for loop's body gets a fresh scope each iteration (a {% set %} there is gone after it; hence
// namespace()), {% if %} gets none; `and` / `or` return an operand as Python's do; a name, key or
// attribute that is not there is undefined (prints nothing, is false, `is defined` is false), and
// reading a key or attribute of undefined fails. Errors name the template position.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shardgraph/text/jinja_expressions.hpp"
#include "shardgraph/text/jinja_filters.hpp"
#include "shardgraph/text/jinja_lexer.hpp"
#include "shardgraph/text/jinja_syntax.hpp"

namespace shardgraph::text::jinja {

class evaluator {
 public:
  evaluator(const evaluator&) = delete;  // expressions_ calls back into this object
  evaluator& operator=(const evaluator&) = delete;
  // source: the template text, for positions in messages. Renders into out.
  evaluator(std::string_view source, variables globals) : source_(source) {
    scopes_.push_back(std::move(globals));
  }

  // What a statement leaves to the statements after it: go on, or leave the loop's iteration.
  enum class flow { next, break_loop, continue_loop };

  flow run(const block& body, std::string& out) {
    for (const statement& s : body)
      if (const flow f = execute(s, out); f != flow::next) return f;
    return flow::next;
  }

 private:
  static constexpr std::size_t max_output_bytes = std::size_t{1} << 28;
  std::string_view source_;
  static constexpr std::size_t max_macro_depth = 100;
  std::vector<variables> scopes_;                             // innermost last
  std::unordered_map<std::string, const statement*> macros_;  // the {% macro %}s run so far
  std::size_t macro_depth_ = 0;
  expression_evaluator expressions_{source_, scopes_,
                                    [this](const expression& call, list args, keyword_arguments keywords) {
                                      return call_macro(call, std::move(args), std::move(keywords));
                                    }};

  [[noreturn]] void error_at(std::size_t offset, const std::string& why) const {
    fail("chat template", why + " at " + position_of(source_, offset),
         "Check the template against the conversation it was given (roles, fields, types)");
  }
  value lookup(const std::string& name) const { return lookup_variable(scopes_, name); }

  flow execute(const statement& s, std::string& out) {
    flow f = flow::next;
    switch (s.kind) {
      case statement::form::text:
        out += s.text;
        break;
      case statement::form::output:
        out += to_output(evaluate(*s.expr));
        break;
      case statement::form::branch:
        for (std::size_t i = 0; i < s.bodies.size(); ++i)
          if (i == s.conditions.size() || truthy(evaluate(*s.conditions[i]))) {
            f = run(s.bodies[i], out);
            break;
          }
        break;
      case statement::form::loop:
        f = execute_loop(s, out);
        break;
      case statement::form::assign:
        assign(s);
        break;
      case statement::form::loop_control:
        f = s.text == "break" ? flow::break_loop : flow::continue_loop;
        break;
      case statement::form::generation:
        f = run(s.bodies[0], out);
        break;
      case statement::form::macro:
        macros_[s.text] = &s;
        break;
    }
    if (out.size() > max_output_bytes)
      error_at(s.offset, "the output grew past " + std::to_string(max_output_bytes) + " bytes");
    return f;
  }

  void assign(const statement& s) {
    value v = evaluate(*s.expr);
    if (s.attribute.empty()) {
      scopes_.back()[s.text] = std::move(v);
      return;
    }
    const value target = lookup(s.text);
    if (!target.is(kind::namespace_object))
      error_at(s.offset, "{% set " + s.text + "." + s.attribute + " %} needs " + s.text +
                             " to be a namespace(), not " + std::string(kind_name(target.type())));
    dict& attributes = target.namespace_attributes();
    for (auto& [key, element] : attributes)
      if (key == s.attribute) {
        element = std::move(v);
        return;
      }
    attributes.emplace_back(s.attribute, std::move(v));
  }

  // The loop's {% else %} body runs outside its iterations: a {% break %} there leaves an outer loop.
  flow execute_loop(const statement& s, std::string& out) {
    list items;
    try {
      items = elements_of(evaluate(*s.expr), "a for loop");
    } catch (const evaluation_problem& p) {
      error_at(s.offset, p.why);
    }
    if (s.loop_filter != nullptr) {
      list kept;
      for (value& item : items) {
        scopes_.emplace_back();
        bind_targets(s, item);
        if (truthy(evaluate(*s.loop_filter))) kept.push_back(std::move(item));
        scopes_.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty() && s.bodies.size() > 1) return run(s.bodies[1], out);
    const auto length = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < length; ++i) {
      scopes_.emplace_back();
      bind_targets(s, items[static_cast<std::size_t>(i)]);
      dict loop{{"index0", i},
                {"index", i + 1},
                {"revindex0", length - i - 1},
                {"revindex", length - i},
                {"first", i == 0},
                {"last", i == length - 1},
                {"length", length}};
      if (i > 0) loop.emplace_back("previtem", items[static_cast<std::size_t>(i - 1)]);
      if (i + 1 < length) loop.emplace_back("nextitem", items[static_cast<std::size_t>(i + 1)]);
      scopes_.back()["loop"] = std::move(loop);
      const flow f = run(s.bodies[0], out);
      scopes_.pop_back();
      if (f == flow::break_loop) break;
    }
    return flow::next;
  }
  void bind_targets(const statement& s, const value& item) {
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = item;
      return;
    }
    if (!item.is(kind::list) || item.as_list().size() != s.targets.size())
      error_at(s.offset, "cannot unpack " + std::string(kind_name(item.type())) + " into " +
                             std::to_string(s.targets.size()) + " loop variables");
    for (std::size_t t = 0; t < s.targets.size(); ++t) scopes_.back()[s.targets[t]] = item.as_list()[t];
  }

  value evaluate(const expression& e) { return expressions_.evaluate(e); }

  // A macro's body rendered with its parameters bound, seeing the template's top-level variables
  // but not the caller's loop variables or sets, as in Jinja2.
  value call_macro(const expression& call, list args, keyword_arguments keywords) {
    const auto found = macros_.find(call.name);
    if (found == macros_.end())
      error_at(call.offset, "the macro " + call.name + "() is called before its {% macro %} ran");
    const statement& macro = *found->second;
    if (args.size() > macro.targets.size())
      error_at(call.offset, call.name + "() takes " + std::to_string(macro.targets.size()) +
                                " arguments, not " + std::to_string(args.size()));
    if (++macro_depth_ > max_macro_depth) error_at(call.offset, "macros call each other more than 100 deep");
    std::vector<variables> caller_scopes = std::move(scopes_);
    scopes_ = {caller_scopes.front(), variables()};
    for (std::size_t i = 0; i < macro.targets.size(); ++i) {
      const auto keyword = std::find_if(keywords.begin(), keywords.end(),
                                        [&](const auto& k) { return k.first == macro.targets[i]; });
      scopes_.back()[macro.targets[i]] = i < args.size()                  ? std::move(args[i])
                                         : keyword != keywords.end()      ? keyword->second
                                         : macro.conditions[i] != nullptr ? evaluate(*macro.conditions[i])
                                                                          : value();
    }
    for (const auto& [name, v] : keywords)
      if (std::find(macro.targets.begin(), macro.targets.end(), name) == macro.targets.end())
        error_at(call.offset, call.name + "() has no parameter " + name);
    std::string out;
    run(macro.bodies[0], out);
    scopes_ = std::move(caller_scopes);
    --macro_depth_;
    return out;
  }
};

}  // namespace shardgraph::text::jinja
