#pragma once
// The parser of the Jinja2 subset that chat templates use: tokens (text/jinja_lexer.hpp) become a
// syntax tree (text/jinja_syntax.hpp), with Jinja2's operator precedence, lowest first:
//   a if c else b  <  or  <  and  <  not  <  == != < <= > >= in, not in  <  + -  <  ~  <  * / // %
//   <  **  <  unary -  <  x.attr x[i] x[a:b] f(...)  then  | filter  and  is test
// so `'a' + x | trim` trims x alone and `1 + 2 ~ 3` is 1 + '23', as in Jinja2. Any construct outside
// the subset ({% raw %}, {% call %}, unknown filters, tests, functions or methods) fails
// here, naming it and its line and column, rather than when a conversation reaches it.
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/text/jinja_builtins.hpp"
#include "shardgraph/text/jinja_lexer.hpp"
#include "shardgraph/text/jinja_syntax.hpp"

namespace shardgraph::text::jinja {

class parser {
 public:
  explicit parser(std::string_view source) : source_(source), tokens_(tokenize(source)) {}

  block parse_template() {
    block body = parse_block({});
    if (pos_ < tokens_.size())
      error_at(current(), "unexpected tag");  // unreachable: parse_block consumes all
    return body;
  }

 private:
  std::string_view source_;
  std::vector<token> tokens_;
  std::size_t pos_ = 0;

  // ---- token stream ----------------------------------------------------------------------------
  const token& current() const {
    static const token end{token_kind::block_end, "", 0};
    return pos_ < tokens_.size() ? tokens_[pos_] : end;
  }
  std::size_t current_offset() const { return pos_ < tokens_.size() ? tokens_[pos_].offset : source_.size(); }
  [[noreturn]] void error_at(const token& t, const std::string& why) const {
    syntax_error(source_, &t == &current() ? current_offset() : t.offset, why);
  }
  bool at_op(std::string_view op) const { return current().kind == token_kind::op && current().text == op; }
  bool at_name(std::string_view name) const {
    return current().kind == token_kind::name && current().text == name;
  }
  bool skip_op(std::string_view op) { return at_op(op) ? (++pos_, true) : false; }
  bool skip_name(std::string_view name) { return at_name(name) ? (++pos_, true) : false; }
  void expect_op(std::string_view op, std::string_view context) {
    if (!skip_op(op))
      error_at(current(), "expected '" + std::string(op) + "' " + std::string(context) + ", found " +
                              describe(current()));
  }
  std::string expect_name(std::string_view context) {
    if (current().kind != token_kind::name)
      error_at(current(), "expected a name " + std::string(context) + ", found " + describe(current()));
    return tokens_[pos_++].text;
  }
  void expect_block_end(std::string_view tag) {
    if (current().kind != token_kind::block_end)
      error_at(current(),
               "expected '%}' to end {% " + std::string(tag) + " %}, found " + describe(current()));
    ++pos_;
  }
  std::string describe(const token& t) const {
    if (pos_ >= tokens_.size()) return "the end of the template";
    switch (t.kind) {
      case token_kind::variable_end:
        return "'}}'";
      case token_kind::block_end:
        return "'%}'";
      case token_kind::string:
        return "a string";
      case token_kind::text:
        return "template text";
      default:
        return "'" + t.text + "'";
    }
  }
  // Bounds on nesting, so that neither parsing nor rendering (both recursive) can exhaust the stack.
  static constexpr std::size_t max_nesting = 100, max_expression_depth = 256;
  std::size_t nesting_ = 0;
  std::size_t loop_depth_ = 0;
  std::vector<std::string> macro_names_;  // the {% macro %}s read so far  // for loops around the statement
                                          // being read ({% break %} needs one)
  struct nesting_guard {
    parser& p;
    nesting_guard(parser& owner, std::size_t offset) : p(owner) {
      if (++p.nesting_ > max_nesting)
        syntax_error(p.source_, offset,
                     "expressions or blocks nested more than " + std::to_string(max_nesting) + " deep");
    }
    ~nesting_guard() { --p.nesting_; }
    nesting_guard(const nesting_guard&) = delete;
    nesting_guard& operator=(const nesting_guard&) = delete;
  };
  // e with its depth set from its operands'; fails past max_expression_depth.
  expression_ptr checked(expression_ptr e) const {
    for (const expression_ptr& operand : e->operands)
      if (operand != nullptr) e->depth = std::max(e->depth, operand->depth + 1);
    for (const auto& keyword : e->keywords) e->depth = std::max(e->depth, keyword.second->depth + 1);
    if (e->depth > max_expression_depth)
      syntax_error(source_, e->offset,
                   "an expression nested more than " + std::to_string(max_expression_depth) + " deep");
    return e;
  }
  static statement make_statement(statement::form kind, std::size_t offset) {
    statement s;
    s.kind = kind, s.offset = offset;
    return s;
  }
  expression_ptr node(expression::form kind, std::size_t offset, std::string name = {}) {
    auto e = std::make_unique<expression>();
    e->kind = kind, e->offset = offset, e->name = std::move(name);
    return e;
  }

  // ---- statements ------------------------------------------------------------------------------
  // Statements up to a {% tag %} named in `ends` (left unconsumed: pos_ at its name) or, with no
  // ends, the end of the template. opener: the tag of the block being read, for messages.
  block parse_block(std::initializer_list<std::string_view> ends, const token* opener = nullptr) {
    block body;
    while (pos_ < tokens_.size()) {
      const token& t = tokens_[pos_];
      if (t.kind == token_kind::text) {
        body.push_back(make_statement(statement::form::text, t.offset));
        body.back().text = t.text;
        ++pos_;
      } else if (t.kind == token_kind::variable_begin) {
        ++pos_;
        statement output = make_statement(statement::form::output, t.offset);
        output.expr = parse_expression();
        if (current().kind != token_kind::variable_end)
          error_at(current(), "expected '}}', found " + describe(current()));
        ++pos_;
        body.push_back(std::move(output));
      } else {
        ++pos_;
        const std::string& tag = current().kind == token_kind::name ? current().text : std::string();
        for (std::string_view end : ends)
          if (tag == end) return body;
        body.push_back(parse_tag(t));
      }
    }
    if (opener != nullptr)
      syntax_error(
          source_, opener->offset,
          "{% " + opener->text + " %} is never closed by {% " + std::string(*std::prev(ends.end())) + " %}");
    return body;
  }
  statement parse_tag(const token& begin) {
    const nesting_guard guard(*this, begin.offset);
    const std::string tag = expect_name("after '{%'");
    if (tag == "if") return parse_if(begin.offset);
    if (tag == "for") return parse_for(begin.offset);
    if (tag == "set") return parse_set(begin.offset);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) syntax_error(source_, begin.offset, "{% " + tag + " %} outside a for loop");
      statement control = make_statement(statement::form::loop_control, begin.offset);
      control.text = tag;
      expect_block_end(tag);
      return control;
    }
    if (tag == "macro") return parse_macro(begin.offset);
    if (tag == "generation") {
      const token& opener = tokens_[pos_ - 1];
      statement generation = make_statement(statement::form::generation, begin.offset);
      expect_block_end(tag);
      generation.bodies.push_back(parse_block({"endgeneration"}, &opener));
      ++pos_;
      expect_block_end("endgeneration");
      return generation;
    }
    syntax_error(source_, begin.offset,
                 "the tag {% " + tag + " %} is not supported" +
                     (tag.starts_with("end") || tag == "else" || tag == "elif"
                          ? " here (no block is open that it ends)"
                          : ""));
  }
  statement parse_if(std::size_t offset) {
    const token& opener = tokens_[pos_ - 1];
    statement branch = make_statement(statement::form::branch, offset);
    branch.conditions.push_back(parse_expression());
    expect_block_end("if");
    while (true) {
      branch.bodies.push_back(parse_block({"elif", "else", "endif"}, &opener));
      const std::string tag = tokens_[pos_++].text;
      if (tag == "endif") break;
      if (tag == "elif") {
        branch.conditions.push_back(parse_expression());
        expect_block_end("elif");
        continue;
      }
      expect_block_end("else");
      branch.bodies.push_back(parse_block({"endif"}, &opener));
      ++pos_;
      break;
    }
    expect_block_end("endif");
    return branch;
  }
  statement parse_for(std::size_t offset) {
    const token& opener = tokens_[pos_ - 1];
    statement loop = make_statement(statement::form::loop, offset);
    do loop.targets.push_back(expect_name("as a loop variable"));
    while (skip_op(","));
    if (!skip_name("in")) error_at(current(), "expected 'in' in {% for %}, found " + describe(current()));
    loop.expr = parse_or();  // not parse_expression: `if` here filters the loop
    if (skip_name("if")) loop.loop_filter = parse_or();
    if (at_name("recursive")) error_at(current(), "recursive loops are not supported");
    expect_block_end("for");
    ++loop_depth_;
    loop.bodies.push_back(parse_block({"else", "endfor"}, &opener));
    --loop_depth_;
    if (tokens_[pos_++].text == "else") {
      expect_block_end("else");
      loop.bodies.push_back(parse_block({"endfor"}, &opener));
      ++pos_;
    }
    expect_block_end("endfor");
    return loop;
  }
  // {% macro name(a, b=default) %} body {% endmacro %}; the name is callable from here on (also in
  // its own body, for recursion).
  statement parse_macro(std::size_t offset) {
    const token& opener = tokens_[pos_ - 1];
    statement macro = make_statement(statement::form::macro, offset);
    macro.text = expect_name("after {% macro");
    expect_op("(", "after the macro's name");
    while (!skip_op(")")) {
      if (!macro.targets.empty()) expect_op(",", "between parameters");
      if (skip_op(")")) break;
      macro.targets.push_back(expect_name("as a parameter"));
      macro.conditions.push_back(skip_op("=") ? parse_expression() : nullptr);
    }
    expect_block_end("macro");
    macro_names_.push_back(macro.text);
    const std::size_t outer_loops = std::exchange(loop_depth_, 0);  // {% break %} cannot leave a macro
    macro.bodies.push_back(parse_block({"endmacro"}, &opener));
    loop_depth_ = outer_loops;
    ++pos_;
    expect_block_end("endmacro");
    return macro;
  }
  statement parse_set(std::size_t offset) {
    statement assign = make_statement(statement::form::assign, offset);
    assign.text = expect_name("after {% set");
    if (skip_op(".")) assign.attribute = expect_name("after '.' in {% set %}");
    if (at_op(",")) error_at(current(), "{% set a, b = ... %} (unpacking) is not supported");
    if (current().kind == token_kind::block_end)
      error_at(current(), "{% set %}...{% endset %} blocks are not supported");
    expect_op("=", "in {% set %}");
    assign.expr = parse_expression();
    expect_block_end("set");
    return assign;
  }

  // ---- expressions -----------------------------------------------------------------------------
  expression_ptr parse_expression() {
    const nesting_guard guard(*this, current_offset());
    expression_ptr e = parse_or();
    while (at_name("if")) {
      auto conditional = node(expression::form::conditional, tokens_[pos_++].offset);
      conditional->operands.push_back(std::move(e));
      conditional->operands.push_back(parse_or());
      conditional->operands.push_back(skip_name("else") ? parse_expression() : nullptr);
      e = checked(std::move(conditional));
    }
    return e;
  }
  expression_ptr binary(std::string op, std::size_t offset, expression_ptr left, expression_ptr right) {
    auto e = node(expression::form::binary, offset, std::move(op));
    e->operands.push_back(std::move(left));
    e->operands.push_back(std::move(right));
    return checked(std::move(e));
  }
  expression_ptr parse_or() { return parse_left_associative({"or"}, &parser::parse_and); }
  expression_ptr parse_and() { return parse_left_associative({"and"}, &parser::parse_not); }
  expression_ptr parse_not() {
    if (!at_name("not")) return parse_compare();
    const nesting_guard guard(*this, current_offset());
    auto e = node(expression::form::unary, tokens_[pos_++].offset, "not");
    e->operands.push_back(parse_not());
    return checked(std::move(e));
  }
  // One comparison at most: chains (a < b < c) are not in the subset, and fail here.
  expression_ptr parse_compare() {
    expression_ptr e = parse_sum();
    for (bool compared = false;; compared = true) {
      const std::size_t offset = current_offset();
      std::string op;
      if (current().kind == token_kind::op &&
          (current().text == "==" || current().text == "!=" || current().text == "<" ||
           current().text == "<=" || current().text == ">" || current().text == ">="))
        op = tokens_[pos_++].text;
      else if (skip_name("in"))
        op = "in";
      else if (at_name("not") && pos_ + 1 < tokens_.size() && tokens_[pos_ + 1].kind == token_kind::name &&
               tokens_[pos_ + 1].text == "in")
        pos_ += 2, op = "not in";
      else
        return e;
      if (compared) syntax_error(source_, offset, "chained comparisons (a < b < c) are not supported");
      e = binary(op, offset, std::move(e), parse_sum());
    }
  }
  // next (op next)*, for the operators ops ("+", "-") or words ("and"), left to right.
  expression_ptr parse_left_associative(std::initializer_list<std::string_view> ops,
                                        expression_ptr (parser::*next)()) {
    expression_ptr e = (this->*next)();
    while (true) {
      const auto op =
          std::find_if(ops.begin(), ops.end(), [&](std::string_view o) { return at_op(o) || at_name(o); });
      if (op == ops.end()) return e;
      const std::size_t offset = tokens_[pos_++].offset;  // before the right operand is parsed
      e = binary(std::string(*op), offset, std::move(e), (this->*next)());
    }
  }
  expression_ptr parse_sum() { return parse_left_associative({"+", "-"}, &parser::parse_concat); }
  expression_ptr parse_concat() { return parse_left_associative({"~"}, &parser::parse_product); }
  expression_ptr parse_product() {
    return parse_left_associative({"*", "/", "//", "%"}, &parser::parse_power);
  }
  expression_ptr parse_power() { return parse_left_associative({"**"}, &parser::parse_filtered_unary); }
  expression_ptr parse_filtered_unary() { return parse_unary(true); }
  expression_ptr parse_unary(bool with_filter) {
    expression_ptr e;
    if (at_op("-") || at_op("+")) {
      const token& sign = tokens_[pos_++];
      const nesting_guard guard(*this, sign.offset);
      e = node(expression::form::unary, sign.offset, sign.text);
      e->operands.push_back(parse_unary(false));
      e = checked(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    return with_filter ? parse_filters_and_tests(std::move(e)) : std::move(e);
  }
  expression_ptr parse_primary() {
    const token& t = current();
    if (pos_ >= tokens_.size()) error_at(t, "the template ends inside an expression");
    const std::size_t offset = t.offset;
    if (t.kind == token_kind::name) {
      ++pos_;
      auto literal = node(expression::form::literal, offset);
      if (t.text == "true" || t.text == "True")
        literal->literal = true;
      else if (t.text == "false" || t.text == "False")
        literal->literal = false;
      else if (t.text == "none" || t.text == "None")
        literal->literal = value::none();
      else
        return node(expression::form::variable, offset, t.text);
      return literal;
    }
    if (t.kind == token_kind::string) {
      std::string text;
      while (current().kind == token_kind::string && pos_ < tokens_.size())
        text += tokens_[pos_++].text;  // 'a' 'b'
      auto literal = node(expression::form::literal, offset);
      literal->literal = std::move(text);
      return literal;
    }
    if (t.kind == token_kind::integer || t.kind == token_kind::floating) {
      ++pos_;
      auto literal = node(expression::form::literal, offset);
      if (t.kind == token_kind::floating)
        literal->literal = std::stod(t.text);
      else if (t.text.size() > 18)
        error_at(t, "integer literal " + t.text + " is too large");
      else
        literal->literal = static_cast<std::int64_t>(std::stoll(t.text));
      return literal;
    }
    if (skip_op("(")) return parse_parenthesized(offset);
    if (skip_op("[")) {
      auto display = node(expression::form::list_display, offset);
      while (!skip_op("]")) {
        if (!display->operands.empty()) expect_op(",", "between list elements");
        if (skip_op("]")) break;
        display->operands.push_back(parse_expression());
      }
      return checked(std::move(display));
    }
    if (skip_op("{")) {
      auto display = node(expression::form::dict_display, offset);
      while (!skip_op("}")) {
        if (!display->operands.empty()) expect_op(",", "between dict items");
        if (skip_op("}")) break;
        display->operands.push_back(parse_expression());
        expect_op(":", "after a dict key");
        display->operands.push_back(parse_expression());
      }
      return checked(std::move(display));
    }
    error_at(t, "expected a value, found " + describe(t));
  }
  // After '(': a parenthesized expression, or a tuple (a, b), which is a list here.
  expression_ptr parse_parenthesized(std::size_t offset) {
    if (skip_op(")")) return node(expression::form::list_display, offset);
    expression_ptr first = parse_expression();
    if (skip_op(")")) return first;
    auto tuple = node(expression::form::list_display, offset);
    tuple->operands.push_back(std::move(first));
    while (!skip_op(")")) {
      expect_op(",", "between tuple elements");
      if (skip_op(")")) break;
      tuple->operands.push_back(parse_expression());
    }
    return checked(std::move(tuple));
  }
  expression_ptr parse_postfix(expression_ptr e) {
    for (;; e = checked(std::move(e))) {
      const std::size_t offset = current_offset();
      if (skip_op(".")) {
        if (current().kind == token_kind::integer) {  // messages.0 is messages[0]
          auto index = node(expression::form::literal, offset);
          index->literal = static_cast<std::int64_t>(std::stoll(tokens_[pos_++].text));
          auto subscript = node(expression::form::subscript, offset);
          subscript->operands.push_back(std::move(e));
          subscript->operands.push_back(std::move(index));
          e = std::move(subscript);
          continue;
        }
        auto attribute = node(expression::form::attribute, offset, expect_name("after '.'"));
        attribute->operands.push_back(std::move(e));
        e = std::move(attribute);
      } else if (skip_op("[")) {
        e = parse_subscript(std::move(e), offset);
      } else if (skip_op("(")) {
        e = parse_call(std::move(e), offset);
      } else {
        return e;
      }
    }
  }
  // After '(' following e: a global function (raise_exception(...)) or a method (s.strip()).
  expression_ptr parse_call(expression_ptr callee, std::size_t offset) {
    expression_ptr call;
    if (callee->kind == expression::form::variable) {
      const bool macro =
          std::find(macro_names_.begin(), macro_names_.end(), callee->name) != macro_names_.end();
      if (!is_function(callee->name) && !macro)
        syntax_error(source_, callee->offset, "the function " + callee->name + "() is not supported");
      call = node(is_function(callee->name) ? expression::form::call : expression::form::macro_call,
                  callee->offset, callee->name);
    } else if (callee->kind == expression::form::attribute) {
      if (!is_method(callee->name))
        syntax_error(source_, callee->offset, "the method ." + callee->name + "() is not supported");
      call = node(expression::form::method_call, callee->offset, callee->name);
      call->operands.push_back(std::move(callee->operands[0]));
    } else {
      syntax_error(source_, offset, "only functions and methods can be called");
    }
    parse_arguments(*call, "in a call");
    return checked(std::move(call));
  }
  expression_ptr parse_subscript(expression_ptr e, std::size_t offset) {
    std::vector<expression_ptr> parts(1);  // start, stop, step; null where omitted
    bool slice = false;
    while (!skip_op("]")) {
      if (skip_op(":")) {
        slice = true;
        if (parts.size() == 3) error_at(current(), "a slice has at most three parts");
        parts.emplace_back();
        continue;
      }
      if (parts.back() != nullptr)
        error_at(current(), "expected ']' or ':' in a subscript, found " + describe(current()));
      parts.back() = parse_expression();
    }
    if (!slice && parts[0] == nullptr) syntax_error(source_, offset, "empty subscript []");
    auto result = node(slice ? expression::form::slice : expression::form::subscript, offset);
    result->operands.push_back(std::move(e));
    parts.resize(slice ? 3 : 1);
    for (auto& part : parts) result->operands.push_back(std::move(part));
    return result;
  }
  expression_ptr parse_filters_and_tests(expression_ptr e) {
    for (;; e = checked(std::move(e))) {
      const std::size_t offset = current_offset();
      if (skip_op("|")) {
        const std::string name = expect_name("after '|'");
        if (!is_filter(name)) syntax_error(source_, offset, "the filter '" + name + "' is not supported");
        auto filter = node(expression::form::filter, offset, name);
        filter->operands.push_back(std::move(e));
        if (skip_op("(")) parse_arguments(*filter, "of a filter");
        check_named_builtin(*filter);
        e = parse_postfix(std::move(filter));
      } else if (skip_name("is")) {
        const bool negated = skip_name("not");
        const std::string name = expect_name("after 'is'");
        if (!is_test(name)) syntax_error(source_, offset, "the test 'is " + name + "' is not supported");
        auto test = node(expression::form::test, offset, name);
        test->negated = negated;
        test->operands.push_back(std::move(e));
        if (skip_op("(")) {
          parse_arguments(*test, "of a test");
        } else if (takes_bare_test_argument()) {
          test->operands.push_back(parse_postfix(parse_primary()));  // x is divisibleby 3
        }
        e = std::move(test);
      } else {
        return e;
      }
    }
  }
  // select('equalto', ...), rejectattr('role', 'none'), map('trim') name a test or a filter: it
  // must be one of the subset's, like any other.
  void check_named_builtin(const expression& filter) const {
    const bool by_test = filter.name == "select" || filter.name == "reject" || filter.name == "selectattr" ||
                         filter.name == "rejectattr";
    if (!by_test && filter.name != "map") return;
    const std::size_t at = filter.name.ends_with("attr") ? 2 : 1;
    if (at >= filter.operands.size() || filter.operands[at]->kind != expression::form::literal ||
        !filter.operands[at]->literal.is(kind::string))
      return;
    const std::string& named = filter.operands[at]->literal.as_string();
    if (by_test ? !is_test(named) : !is_filter(named))
      syntax_error(source_, filter.operands[at]->offset,
                   std::string(by_test ? "the test '" : "the filter '") + named + "' is not supported");
  }
  bool takes_bare_test_argument() const {
    const token& t = current();
    if (t.kind == token_kind::name)
      return t.text != "else" && t.text != "or" && t.text != "and" && t.text != "if";
    return t.kind == token_kind::string || t.kind == token_kind::integer || t.kind == token_kind::floating ||
           at_op("[") || at_op("{");
  }
  // After '(': positional then keyword arguments, up to ')'.
  void parse_arguments(expression& call, std::string_view context) {
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",", "between arguments " + std::string(context));
      first = false;
      if (skip_op(")")) break;
      if (current().kind == token_kind::name && pos_ + 1 < tokens_.size() &&
          tokens_[pos_ + 1].kind == token_kind::op && tokens_[pos_ + 1].text == "=") {
        std::string keyword = tokens_[pos_].text;
        pos_ += 2;
        call.keywords.emplace_back(std::move(keyword), parse_expression());
      } else {
        if (!call.keywords.empty()) error_at(current(), "a positional argument follows a keyword argument");
        call.operands.push_back(parse_expression());
      }
    }
  }
};

}  // namespace shardgraph::text::jinja
