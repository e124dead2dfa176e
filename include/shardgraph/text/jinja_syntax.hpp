#pragma once
// The syntax tree of a parsed Jinja2 chat template (text/jinja_parser.hpp builds it once,
// text/jinja_evaluator.hpp renders it for each conversation).
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/text/jinja_value.hpp"

namespace shardgraph::text::jinja {

struct expression;
using expression_ptr = std::unique_ptr<expression>;

// One expression node; which fields it uses depends on its form:
//   literal      {{ 'a' }}, {{ 3 }}              value
//   variable     {{ messages }}                   name
//   list_display [a, b]  (and tuples (a, b))      operands
//   dict_display {'k': v}                         operands: key, value, key, value, ...
//   attribute    message.role                     operands[0], name
//   subscript    messages[0]                      operands[0], operands[1]
//   slice        messages[1:], s[::-1]            operands[0], then start, stop, step (null: omitted)
//   call         raise_exception('...')           name (a global function), operands = arguments
//   macro_call   render_type(spec)                name (a {% macro %} of the template), operands = arguments
//   method_call  content.strip()                  operands[0] = object, name, then the arguments
//   filter       x | trim, x | join(', ')         operands[0], name, then the arguments
//   test         x is defined, x is not none      operands[0], name, then the arguments; negated
//   unary        not x, -x                        name ("not", "-"), operands[0]
//   binary       a + b, a and b, a in b           name (the operator), operands[0], operands[1]
//   conditional  a if c else b                    operands: a, c, b (null: no else)
// Keyword arguments (namespace(x=1), tojson(indent=2)) are in keywords.
struct expression {
  enum class form {
    literal,
    variable,
    list_display,
    dict_display,
    attribute,
    subscript,
    slice,
    call,
    macro_call,
    method_call,
    filter,
    test,
    unary,
    binary,
    conditional
  };
  form kind;
  std::size_t offset = 0;  // in the template source, for messages
  std::string name;
  value literal;
  std::vector<expression_ptr> operands;
  std::vector<std::pair<std::string, expression_ptr>> keywords;
  bool negated = false;
  std::size_t depth = 1;  // of the tree under this node, which the parser bounds (evaluation recurses)
};

struct statement;
using block = std::vector<statement>;

// One statement of the template:
//   text     template text, written as is
//   output   {{ expression }}
//   branch   {% if %} {% elif %}... {% else %} {% endif %}: conditions[i] selects bodies[i]; a last
//            body without condition is the else
//   loop     {% for targets in expression [if filter] %} bodies[0] {% else %} bodies[1] {% endfor %}
//   assign   {% set target = expression %}, {% set target.attribute = expression %}
//   loop_control  {% break %}, {% continue %} (text), inside a loop's body
//   generation    {% generation %} bodies[0] {% endgeneration %} (transformers' tag marking the
//                 assistant's text; it renders its body)
//   macro    {% macro text(targets[0], targets[1]=conditions[1], ...) %} bodies[0] {% endmacro %}:
//            conditions[i] is parameter i's default (null: none)
struct statement {
  enum class form { text, output, branch, loop, assign, loop_control, generation, macro };
  form kind;
  std::size_t offset = 0;
  std::string text;                  // text; for assign: the target name
  std::string attribute;             // assign to a namespace attribute (empty: to a variable)
  std::vector<std::string> targets;  // loop variables (two for `for key, value in ...`)
  expression_ptr expr;               // output, assign's value, loop's iterable
  expression_ptr loop_filter;        // for ... if condition (may be null)
  std::vector<expression_ptr> conditions;
  std::vector<block> bodies;
};

}  // namespace shardgraph::text::jinja
