#include "shardgraph/io/json.hpp"

#include <string>
#include <string_view>

#include "catch.hpp"

namespace json = shardgraph::io::json;

namespace {

using shardgraph::testing::contains;
using shardgraph::testing::error_of;



}  // namespace

TEST_CASE("json parses objects in file order, arrays and scalars", "[io]") {
  const auto v =
      json::parse(R"( {"b": [1, -2.5, "x", true, false, null], "a": {"n": 0}, "e": {}, "f": []} )");
  const json::object& members = v.as_object();
  REQUIRE(members.size() == 4);
  CHECK(members[0].first == "b");
  CHECK(members[1].first == "a");
  const json::value& b = v.at("b");
  REQUIRE(b.as_array().size() == 6);
  CHECK(b.at(0).as_int() == 1);
  CHECK(b.at(1).as_double() == -2.5);
  CHECK(b.at(2).as_string() == "x");
  CHECK(b.at(3).as_bool());
  CHECK_FALSE(b.at(4).as_bool());
  CHECK(b.at(5).is_null());
  CHECK(v.at("a").at("n").as_int() == 0);
  CHECK(v.at("e").as_object().empty());
  CHECK(v.at("f").as_array().empty());
  CHECK(v.contains("a"));
  CHECK_FALSE(v.contains("z"));
  CHECK(v.find("z") == nullptr);
  CHECK(b.at(1).name() == "b[1]");
}

TEST_CASE("json numbers: integers stay exact, the rest are doubles", "[io]") {
  CHECK(json::parse("-9223372036854775808").as_int() == INT64_MIN);
  CHECK(json::parse("9223372036854775807").as_int() == INT64_MAX);
  CHECK(json::parse("9223372036854775808").type() == json::kind::number);
  CHECK(json::parse("9223372036854775808").as_double() == 9223372036854775808.0);
  CHECK(json::parse("1e3").type() == json::kind::number);
  CHECK(json::parse("1E-2").as_double() == 0.01);
  CHECK(json::parse("-0").as_int() == 0);
  CHECK(json::parse("0.5").as_double() == 0.5);
  CHECK(json::parse("12").as_double() == 12.0);
}

TEST_CASE("json strings: escapes, \\u to UTF-8, surrogate pairs, raw UTF-8", "[io]") {
  CHECK(json::parse(R"("a\"b\\c\/d\b\f\n\r\t")").as_string() == "a\"b\\c/d\b\f\n\r\t");
  CHECK(json::parse(R"("\u0041\u00e9\u20AC")").as_string() == "A\xc3\xa9\xe2\x82\xac");
  CHECK(json::parse(R"("\ud83d\ude00")").as_string() == "\xf0\x9f\x98\x80");
  CHECK(json::parse("\"\xe6\x97\xa5\xf0\x9f\x98\x80\"").as_string() == "\xe6\x97\xa5\xf0\x9f\x98\x80");
  CHECK(json::parse(R"("\u0000")").as_string() == std::string(1, '\0'));
}

TEST_CASE("json quote writes what parse reads back", "[io]") {
  const std::string nasty = std::string("q\"b\\s/\x01\x1f\n\0end \xc3\xa9", 17);
  CHECK(json::parse(json::quote(nasty)).as_string() == nasty);
  CHECK(json::quote("a\"b") == R"("a\"b")");
}

TEST_CASE("json utf-8 validation follows RFC 3629", "[io]") {
  CHECK(json::is_valid_utf8("plain \xc3\xa9 \xe2\x82\xac \xf4\x8f\xbf\xbf"));
  CHECK_FALSE(json::is_valid_utf8("\xc0\xaf"));          // overlong '/'
  CHECK_FALSE(json::is_valid_utf8("\xe0\x80\xaf"));      // overlong
  CHECK_FALSE(json::is_valid_utf8("\xed\xa0\x80"));      // a surrogate
  CHECK_FALSE(json::is_valid_utf8("\xf4\x90\x80\x80"));  // beyond U+10FFFF
  CHECK_FALSE(json::is_valid_utf8("\xe2\x82"));          // cut short
  CHECK_FALSE(json::is_valid_utf8("\x80"));
  CHECK_FALSE(json::is_valid_utf8("\xff"));
}

TEST_CASE("json rejects everything that is not strict JSON, giving the byte offset", "[io]") {
  struct bad_case {
    std::string_view text, phrase;
  };
  const bad_case cases[] = {
      {"", "expected a value"},
      {"   ", "expected a value"},
      {"{", "expected a string key"},
      {"{\"a\"}", "expected ':'"},
      {"{\"a\":1,}", "expected a string key"},
      {"[1,]", "expected a value"},
      {"[1 2]", "expected ','"},
      {"{1:2}", "expected a string key"},
      {"01", "after the end"},
      {"1.", "expected a digit"},
      {".5", "expected a value"},
      {"+1", "expected a value"},
      {"-", "expected a digit"},
      {"1e", "expected a digit"},
      {"1e400", "outside the range"},
      {"NaN", "expected a value"},
      {"Infinity", "expected a value"},
      {"tru", "expected a value"},
      {"nul", "expected a value"},
      {"// c\n1", "expected a value"},
      {"1 2", "after the end"},
      {"[1]x", "after the end"},
      {"\"abc", "unterminated string"},
      {"\"abc\\", "unterminated string"},
      {"\"\\x\"", "unknown escape"},
      {"\"\\u12g4\"", "four hex digits"},
      {"\"a\x01\"", "control character"},
      {"\"a\nb\"", "control character"},
      {"\"\\ud800\"", "high surrogate"},
      {"\"\\ud800\\u0041\"", "not by a low surrogate"},
      {"\"\\udc00\"", "lone low surrogate"},
      {"\"\xff\"", "invalid UTF-8"},
      {"\"\xc0\xaf\"", "invalid UTF-8"},
      {"\"\xed\xa0\x80\"", "invalid UTF-8"},
      {"\xef\xbb\xbf{}", "expected a value"},  // a byte order mark
      {"{\"a\":1,\"a\":2}", "duplicate key \"a\""},
  };
  for (const auto& c : cases) {
    const std::string message = error_of([&] { json::parse(c.text, "config.json"); });
    INFO(c.text << " -> " << message);
    CHECK(contains(message, "shardgraph: config.json: invalid JSON at byte "));
    CHECK(contains(message, c.phrase));
  }
  CHECK(contains(error_of([] { json::parse("[1, 2,, 3]"); }), "at byte 6:"));
  json::parse_limits inside_a_file;
  inside_a_file.first_byte_offset = 8;
  CHECK(contains(error_of([&] { json::parse("[1, 2,, 3]", "f", inside_a_file); }), "at byte 14:"));

  std::string many_keys = "{";
  for (int i = 0; i < 40; ++i) many_keys += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  CHECK(json::parse(many_keys + "\"last\":0}").as_object().size() == 41);
  CHECK(contains(error_of([&] { json::parse(many_keys + "\"k17\":0}"); }), "duplicate key \"k17\""));
}

TEST_CASE("json bounds nesting, size and value count", "[io]") {
  CHECK_NOTHROW(json::parse(std::string(64, '[') + std::string(64, ']')));
  CHECK(contains(error_of([] { json::parse(std::string(65, '[') + std::string(65, ']')); }),
            "nesting deeper than 64"));
  CHECK(contains(error_of([] { json::parse(std::string(1'000'000, '[')); }), "nesting deeper than 64"));
  std::string deep_objects;
  for (int i = 0; i < 100'000; ++i) deep_objects += "{\"a\":";
  CHECK(contains(error_of([&] { json::parse(deep_objects); }), "nesting deeper than 64"));

  json::parse_limits small;
  small.max_values = 3;
  CHECK_NOTHROW(json::parse("[1,2]", "x", small));
  CHECK(contains(error_of([&] { json::parse("[1,2,3]", "x", small); }), "more than 3 values"));
  small.max_bytes = 4;
  CHECK(contains(error_of([&] { json::parse("[1,2]", "x", small); }), "over the limit of 4 bytes"));
}

TEST_CASE("json accessors name the missing or mistyped key", "[io]") {
  const auto config = json::parse(R"({"n_embd": 768, "activation": "gelu_new", "layers": [1, 2]})");
  CHECK(config.at("n_embd").as_int() == 768);
  std::string message = error_of([&] { config.at("n_head"); });
  CHECK(contains(message, "shardgraph: json: key \"n_head\" is missing"));
  message = error_of([&] { config.at("activation").as_int(); });
  CHECK(contains(message, "\"activation\" is a string, not an integer"));
  message = error_of([&] { config.at("layers").at(2); });
  CHECK(contains(message, "\"layers\" has 2 elements, no element 2"));
  message = error_of([&] { config.at("layers").at(1).as_string(); });
  CHECK(contains(message, "\"layers[1]\" is an integer, not a string"));
  CHECK(contains(error_of([] { json::parse("2.5").as_int(); }), "the top-level value is a non-integer number"));
  CHECK(contains(error_of([] { json::parse("[]").at("k"); }), "is an array, not an object"));
}
