// shardgraph::text::chat_template against transformers: the chat templates of TinyLlama, LLaMA-2,
// LLaMA-3, LLaMA-3.1, Qwen2 (ChatML), Mistral, Gemma, Phi-3 and Qwen3, tests/golden/llama's, and four
// of our own (one using every construct of the subset, expressions.jinja, whitespace.jinja and its
// CRLF copy), rendered by transformers for several conversations each
// (tests/text/chat_templates/make_chat_golden.py writes chat_golden.json); every case must render
// byte for byte, or fail with the same raise_exception message. Then the ways a checkpoint
// directory holds its template, and the errors for what is missing or unsupported.
#include "shardgraph/text/chat_template.hpp"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "catch.hpp"

namespace text = shardgraph::text;
namespace jinja = shardgraph::text::jinja;
namespace json = shardgraph::io::json;
using shardgraph::testing::contains;
using shardgraph::testing::error_of;

namespace {

const std::string source_dir = SHARDGRAPH_SOURCE_DIR;

json::value read_golden() {
  const std::string path = source_dir + "/tests/text/chat_templates/chat_golden.json";
  const auto file = shardgraph::io::file_contents::open(path);
  const auto bytes = file.bytes();
  return json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

std::vector<text::chat_message> messages_of(const json::value& c) {
  std::vector<text::chat_message> messages;
  for (const json::value& m : c.at("messages").as_array())
    messages.push_back({m.at(0).as_string(), m.at(1).as_string()});
  return messages;
}

jinja::dict extra_of(const json::value& c) {
  jinja::dict extra;
  for (const auto& [name, v] : c.at("extra").as_object()) extra.emplace_back(name, jinja::from_json(v));
  return extra;
}

// Renders every case of one template of the golden file; returns how many were checked.
int check_cases(const text::chat_template& chat, const json::value& golden_template) {
  int checked = 0;
  for (const json::value& c : golden_template.at("cases").as_array()) {
    INFO(golden_template.at("name").as_string()
         << ", " << c.at("conversation").as_string() << ", add_generation_prompt "
         << c.at("add_generation_prompt").as_bool() << ", extra " << c.at("extra").as_object().size());
    const auto render = [&] {
      return chat.render(messages_of(c), c.at("add_generation_prompt").as_bool(), extra_of(c));
    };
    if (const json::value* expected = c.find("expected")) {
      CHECK(render() == expected->as_string());
    } else {
      const std::string message = error_of(render);
      CHECK_THAT(message, shardgraph::testing::ContainsSubstring("shardgraph: chat template: "));
      if (c.at("error_kind").as_string() == "raise_exception")
        CHECK_THAT(message, shardgraph::testing::ContainsSubstring("raised an exception: " +
                                                                   c.at("error").as_string()));
      else
        CHECK_THAT(message, shardgraph::testing::ContainsSubstring("is undefined"));
    }
    ++checked;
  }
  return checked;
}

// A fresh directory under the temporary directory, removed with the object.
struct scratch_directory {
  std::filesystem::path path;
  explicit scratch_directory(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("shardgraph_chat_template_test_" + name)) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~scratch_directory() { std::filesystem::remove_all(path); }
  void write(const std::string& file, const std::string& contents) const {
    std::ofstream(path / file) << contents;
  }
};

const std::vector<text::chat_message> hello = {{"user", "Hi"}};

}  // namespace

TEST_CASE("chat templates render as transformers renders them", "[text]") {
  const json::value golden = read_golden();
  int checked = 0, templates = 0;
  for (const json::value& t : golden.at("templates").as_array()) {
    const text::chat_template chat(t.at("source").as_string(), t.at("bos_token").as_string(),
                                   t.at("eos_token").as_string());
    checked += check_cases(chat, t);
    ++templates;
  }
  CHECK(templates == 14);
  CHECK(checked >= 300);
}

TEST_CASE("the golden LLaMA checkpoint's chat template loads and renders as transformers does", "[text]") {
  const json::value golden = read_golden();
  const auto chat = text::chat_template::from_directory(source_dir + "/tests/golden/llama");
  CHECK(chat.bos_token() == "<s>");
  CHECK(chat.eos_token() == "</s>");
  for (const json::value& t : golden.at("templates").as_array())
    if (t.at("name").as_string() == "golden_llama") {
      CHECK(chat.source() == t.at("source").as_string());
      CHECK(check_cases(chat, t) > 0);
    }
}

TEST_CASE("from_directory reads the template where checkpoints keep it", "[text]") {
  const scratch_directory dir("forms");
  const std::string template_source =
      "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}{{ eos_token }}";
  SECTION("a string, with tokens as strings or as AddedToken objects") {
    dir.write("tokenizer_config.json",
              R"({"bos_token": {"content": "<s>", "lstrip": false, "__type": "AddedToken"},
                                           "eos_token": "</s>", "chat_template": ")" +
                  template_source + R"("})");
    CHECK(text::chat_template::from_directory(dir.path).render(hello, false) == "<s>user:Hi</s>");
  }
  SECTION("a list of named templates: the one named default") {
    dir.write("tokenizer_config.json", R"({"eos_token": null, "chat_template": [
      {"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain {{ messages | length }}"}]})");
    CHECK(text::chat_template::from_directory(dir.path).render(hello, false) == "plain 1");
    CHECK(text::chat_template::from_directory(dir.path, "tool_use").render(hello, false) == "tools");
    CHECK(text::chat_template::from_directory(dir.path, "rag").render(hello, false) == "plain 1");
  }
  SECTION("chat_template.jinja beside tokenizer_config.json, which gives the tokens") {
    dir.write("tokenizer_config.json",
              R"({"bos_token": "<B>", "eos_token": "<E>", "chat_template": "ignored"})");
    dir.write("chat_template.jinja", template_source);
    CHECK(text::chat_template::from_directory(dir.path).render(hello, false) == "<B>user:Hi<E>");
  }
  SECTION("chat_template.jinja, and additional_chat_templates/<name>.jinja by name") {
    dir.write("chat_template.jinja", "default");
    std::filesystem::create_directories(dir.path / "additional_chat_templates");
    dir.write("additional_chat_templates/tool_use.jinja", "tool use");
    CHECK(text::chat_template::from_directory(dir.path).render(hello, false) == "default");
    CHECK(text::chat_template::from_directory(dir.path, "tool_use").render(hello, false) == "tool use");
    CHECK(text::chat_template::from_directory(dir.path, "rag").render(hello, false) == "default");
  }
  SECTION("chat_template.jinja alone") {
    dir.write("chat_template.jinja", template_source);
    CHECK(text::chat_template::from_directory(dir.path).render(hello, false) == "user:Hi");
    CHECK(text::chat_template::present_in(dir.path));
  }
}

TEST_CASE("a directory without a usable template fails saying what is missing", "[text]") {
  const scratch_directory dir("missing");
  const auto load = [&] { text::chat_template::from_directory(dir.path); };
  CHECK_FALSE(text::chat_template::present_in(dir.path));
  CHECK_THAT(error_of(load),
             shardgraph::testing::ContainsSubstring(
                 "has no chat template (no tokenizer_config.json, and no chat_template.jinja)"));
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": null})");
  CHECK_FALSE(text::chat_template::present_in(dir.path));
  CHECK_THAT(error_of(load),
             shardgraph::testing::ContainsSubstring("tokenizer_config.json has no \"chat_template\""));
  dir.write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "rag", "template": "y"}]})");
  CHECK_THAT(error_of(load), shardgraph::testing::ContainsSubstring(
                                 "lists the templates tool_use, rag but none named \"default\"."));
  CHECK_THAT(error_of([&] { text::chat_template::from_directory(dir.path, "other"); }),
             shardgraph::testing::ContainsSubstring("but none named \"other\" or \"default\""));
  dir.write("tokenizer_config.json", R"({"chat_template": 3})");
  CHECK_THAT(error_of(load), shardgraph::testing::ContainsSubstring("\"chat_template\" is an integer"));
  CHECK(text::chat_template::present_in(dir.path));  // present, though from_directory rejects it
  dir.write("tokenizer_config.json", R"({"eos_token": 2, "chat_template": "x"})");
  CHECK_THAT(error_of(load), shardgraph::testing::ContainsSubstring("\"eos_token\" is an integer"));
}

TEST_CASE("constructs outside the subset fail when parsed, naming the construct and where it is", "[text]") {
  const std::pair<std::string, std::string> cases[] = {
      {"{% call f() %}{% endcall %}", "the tag {% call %} is not supported at line 1, column 1"},
      {"{% macro f(a) %}{{ caller() }}{% endmacro %}",
       "the function caller() is not supported at line 1, column 20"},
      {"a\n  {% raw %}x{% endraw %}", "the tag {% raw %} is not supported at line 2, column 3"},
      {"{% if true %}{% break %}{% endif %}", "{% break %} outside a for loop at line 1, column 14"},
      {"{% for m in messages %}{% filter upper %}x{% endfilter %}{% endfor %}",
       "the tag {% filter %} is not supported at line 1, column 24"},
      {"{% endif %}", "the tag {% endif %} is not supported here (no block is open that it ends)"},
      {"{{ messages | groupby('role') }}", "the filter 'groupby' is not supported at line 1, column 13"},
      {"{{ [1] | select('callable') }}", "the test 'callable' is not supported at line 1, column 17"},
      {"{{ [1] | map('pprint') }}", "the filter 'pprint' is not supported at line 1, column 14"},
      {"{{ dict(a=1) }}", "the function dict() is not supported at line 1, column 4"},
      {"{{ messages.append(1) }}", "the method .append() is not supported at line 1, column 12"},
      {"{% if x is callable %}{% endif %}", "the test 'is callable' is not supported"},
      {"{% if true %}never closed", "{% if %} is never closed by {% endif %} at line 1, column 4"},
      {"x\n{% for m in messages %}{% else %}",
       "{% for %} is never closed by {% endfor %} at line 2, column 4"},
      {"{{ 'unterminated }}", "string literal is never closed at line 1, column 4"},
      {"{{ x ", "\"{{\" is never closed by \"}}\" at line 1, column 1"},
      {"{# comment", "comment \"{#\" is never closed by \"#}\""},
      {"{{ a ; b }}", "unexpected character ';' in an expression at line 1, column 6"},
      {"{% set a, b = 1, 2 %}", "{% set a, b = ... %} (unpacking) is not supported"},
      {"{% set x %}body{% endset %}", "{% set %}...{% endset %} blocks are not supported"},
      {"{{ 1 + }}", "expected a value, found '}}' at line 1, column 8"},
  };
  std::vector<std::pair<std::string, std::string>> all(std::begin(cases), std::end(cases));
  // Bounded nesting: neither parsing nor rendering may exhaust the stack, whatever the template.
  all.emplace_back("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}",
                   "expressions or blocks nested more than 100 deep");
  all.emplace_back(
      std::string(500, ' ') + "{{ 1" +
          [] {
            std::string sum;
            for (int i = 0; i < 300; ++i) sum += " + 1";
            return sum;
          }() +
          " }}",
      "an expression nested more than 256 deep");
  all.emplace_back(
      [] {
        std::string blocks;
        for (int i = 0; i < 200; ++i) blocks += "{% if true %}";
        return blocks;
      }(),
      "expressions or blocks nested more than 100 deep");
  all.emplace_back("{{ 1 < 2 < 3 }}",
                   "chained comparisons (a < b < c) are not supported at line 1, column 10");
  for (const auto& [source, expected] : all) {
    INFO(source);
    const std::string message = error_of([&] { text::chat_template(source, "", ""); });
    CHECK_THAT(message, shardgraph::testing::ContainsSubstring("shardgraph: chat template: " + expected));
    CHECK_THAT(message, shardgraph::testing::ContainsSubstring("docs/tokenizers.md"));
  }
}

TEST_CASE("errors while rendering name the problem and its position", "[text]") {
  const std::pair<std::string, std::string> cases[] = {
      {"\n{{ raise_exception('Only user and assistant roles are supported!') }}",
       "the template raised an exception: Only user and assistant roles are supported! (at line 2, column "
       "4)"},
      {"{{ messages[3].role }}", "messages[3] is undefined, so it has no 'role'"},
      {"{{ messages + 'x' }}", "cannot apply + to a list and a string at line 1, column 13"},
      {"{% set x = 1 %}{% set x.y = 2 %}",
       "{% set x.y %} needs x to be a namespace(), not an integer at line 1, column 16"},
      {"{{ messages[0].content.strip(1) }}", "strip takes a string, not an integer at line 1, column 23"},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "m() takes 1 arguments, not 2 at line 1, column 34"},
      {"{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "m() has no parameter b"},
      {"{% if false %}{% macro m() %}{% endmacro %}{% endif %}{{ m() }}",
       "the macro m() is called before its {% macro %} ran"},
      {"{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", "macros call each other more than 100 deep"},
      {"{{ 1 // 0 }}", "division by zero"},
      {"{{ 1 < 'a' }}", "cannot compare an integer with a string by <"},
      {"{% for a, b in messages %}{% endfor %}", "cannot unpack a dict into 2 loop variables"},
  };
  for (const auto& [source, expected] : cases) {
    INFO(source);
    const std::string message = error_of([&] { text::chat_template(source, "", "").render(hello, true); });
    CHECK_THAT(message, shardgraph::testing::ContainsSubstring("shardgraph: chat template: " + expected));
  }
}

TEST_CASE("strftime_now formats the local time, as transformers' does", "[text]") {
  const auto today = [] {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char text[32];
    return std::string(text, std::strftime(text, sizeof text, "%d %b %Y", &local));
  };
  const std::string before = today();
  const std::string rendered =
      text::chat_template("{{ strftime_now('%d %b %Y') }}", "", "").render(hello, false);
  CHECK((rendered == before || rendered == today()));  // either side of a midnight
  CHECK(rendered.size() == 11);
}

TEST_CASE("a parsed template renders many conversations, and copies share it", "[text]") {
  const text::chat_template chat(
      "{% for m in messages %}[{{ m.role }}]{% endfor %}{{ '>' if add_generation_prompt }}", "", "");
  const text::chat_template copy = chat;
  const std::vector<text::chat_message> two = {{"system", "s"}, {"user", "u"}};
  CHECK(chat.render(hello, false) == "[user]");
  CHECK(copy.render(two, true) == "[system][user]>");
  CHECK(chat.render({}, true) == ">");
  CHECK(&copy.source() == &chat.source());
}

TEST_CASE("extra variables reach the template and override the defaults", "[text]") {
  const text::chat_template chat("{{ enable_thinking is defined }} {{ enable_thinking }} {{ tools }}", "",
                                 "");
  CHECK(chat.render(hello, false) == "False  None");
  CHECK(chat.render(hello, false, {{"enable_thinking", false}, {"tools", jinja::list{"a", "b"}}}) ==
        "True False ['a', 'b']");
}
