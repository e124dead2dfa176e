// The tokenizers of shardgraph::text against the `tokenizers` Python package: six tokenizer.json
// files trained by tests/text/tokenizers/make_tokenizers.py (GPT-2-like and LLaMA-3-like byte-level
// BPE, LLaMA-2-like SentencePiece BPE with byte fallback behind a normalizer or behind Metaspace,
// one with <unk> instead of byte fallback and lstrip / rstrip / single_word / normalized added
// tokens, one with the other normalizer, pre-tokenizer and decoder parts), and the ids and texts
// the package gives for tests/text/tokenizers/test_strings.json.
#include "shardgraph/text/tokenizer.hpp"
#include "shardgraph/text/decode_stream.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "catch.hpp"

namespace text = shardgraph::text;
namespace json = shardgraph::io::json;
using shardgraph::testing::contains;
using shardgraph::testing::error_of;

namespace {

const std::string data_dir = SHARDGRAPH_SOURCE_DIR "/tests/text/tokenizers/";
const std::vector<std::string> tokenizer_names = {
    "gpt2", "llama3", "llama2", "metaspace", "unknown_and_stripped", "other_parts"};

std::vector<std::int32_t> ids_of(const json::value& list) {
  std::vector<std::int32_t> ids;
  for (const json::value& id : list.as_array()) ids.push_back(static_cast<std::int32_t>(id.as_int()));
  return ids;
}

std::vector<std::optional<std::string>> strings_or_nulls(const json::value& list) {
  std::vector<std::optional<std::string>> out;
  for (const json::value& s : list.as_array())
    out.push_back(s.is_null() ? std::nullopt : std::optional(s.as_string()));
  return out;
}

json::value read_json(const std::string& path) {
  const auto file = shardgraph::io::file_contents::open(path);
  const auto bytes = file.bytes();
  return json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

std::vector<std::string> test_strings() {
  std::vector<std::string> texts;
  const json::value list = read_json(data_dir + "test_strings.json");
  for (const json::value& t : list.as_array()) texts.push_back(t.as_string());
  return texts;
}

// A tokenizer.json of a byte-level BPE over the bytes 'a' and 'b' with the merge "a b", whose
// component `field` is replaced by `replacement` (JSON text).
std::string tiny_tokenizer_json(std::string_view field = "", std::string_view replacement = "") {
  std::string parts[][2] = {
      {"model", R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})"},
      {"normalizer", "null"},
      {"pre_tokenizer", R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})"},
      {"post_processor", "null"},
      {"decoder", R"({"type": "ByteLevel"})"},
      {"truncation", "null"}};
  std::string out = R"({"added_tokens": [{"id": 3, "content": "<end>", "special": true}])";
  for (auto& [name, value] : parts)
    out += ", \"" + name + "\": " + (name == field ? std::string(replacement) : value);
  return out + "}";
}

}  // namespace

TEST_CASE("encode and decode equal the tokenizers package's on every test string", "[text]") {
  const std::vector<std::string> texts = test_strings();
  for (const std::string& name : tokenizer_names) {
    const auto tok = text::tokenizer::from_file(data_dir + name + ".json");
    const json::value expected = read_json(data_dir + name + "_expected.json");
    CHECK(tok.vocab_size() == static_cast<std::size_t>(expected.at("vocab_size").as_int()));
    const json::array& cases = expected.at("cases").as_array();
    REQUIRE(cases.size() == texts.size());
    for (const json::value& c : cases) {
      const std::string& s = c.at("text").as_string();
      INFO(name << ": text \"" << s << "\"");
      CHECK(tok.encode(s, {.add_special_tokens = false}) == ids_of(c.at("ids")));
      const std::vector<std::int32_t> with_special = ids_of(c.at("ids_with_special"));
      CHECK(tok.encode(s) == with_special);
      CHECK(tok.decode(with_special) == c.at("decoded").as_string());
      std::vector<std::optional<std::string>> streamed;
      text::decode_stream stream(tok);
      for (const std::int32_t id : with_special) streamed.push_back(stream.step(id));
      CHECK(streamed == strings_or_nulls(c.at("streamed")));
      CHECK(tok.decode(with_special, {.skip_special_tokens = true}) ==
            c.at("decoded_skipping_special").as_string());
    }
  }
}

TEST_CASE("decode(encode(text)) gives the text back", "[text]") {
  // Byte-level BPE keeps every byte; SentencePiece BPE behind the Prepend + Replace normalizer
  // keeps every text without its own '▁' (U+2581); Metaspace's decoder drops a leading space.
  for (const std::string name : {"gpt2", "llama3", "llama2"}) {
    const auto tok = text::tokenizer::from_file(data_dir + name + ".json");
    for (const std::string& s : test_strings()) {
      const bool has_added_token =
          contains(s, "<|") || contains(s, "<s>") || contains(s, "</s>") || contains(s, "<unk>");
      if (has_added_token || (name == "llama2" && contains(s, "\u2581"))) continue;
      INFO(name << ": text \"" << s << "\"");
      CHECK(tok.decode(tok.encode(s, {.add_special_tokens = false})) == s);
    }
  }
}

TEST_CASE("added tokens inside text are kept whole", "[text]") {
  const auto gpt2 = text::tokenizer::from_file(data_dir + "gpt2.json");
  const std::int32_t end_of_text = gpt2.token_id("<|endoftext|>").value();
  CHECK(gpt2.is_special(end_of_text));
  const std::vector<std::int32_t> ids = gpt2.encode("one<|endoftext|>two <|endoftext|><|endoftext|>");
  CHECK(std::count(ids.begin(), ids.end(), end_of_text) == 3);
  CHECK(ids == [&] {  // the text around the tokens is encoded as on its own
    std::vector<std::int32_t> expected = gpt2.encode("one");
    expected.push_back(end_of_text);
    for (const std::int32_t id : gpt2.encode("two ")) expected.push_back(id);
    expected.insert(expected.end(), {end_of_text, end_of_text});
    return expected;
  }());
  CHECK(gpt2.decode(ids, {.skip_special_tokens = true}) == "onetwo ");

  const auto llama2 = text::tokenizer::from_file(data_dir + "llama2.json");
  const std::int32_t bos = llama2.token_id("<s>").value();
  const std::vector<std::int32_t> with_bos = llama2.encode("Hi");
  REQUIRE(with_bos.size() >= 2);
  CHECK(with_bos.front() == bos);
  CHECK(llama2.encode("Hi", {.add_special_tokens = false}) ==
        std::vector(with_bos.begin() + 1, with_bos.end()));
  CHECK(llama2.token(bos) == "<s>");
  CHECK_FALSE(llama2.token_id("<|endoftext|>").has_value());
}

TEST_CASE("split behaviours cut text as the package documents", "[text]") {
  // The package's documentation of Split: "the-final--countdown" split by "-".
  const std::string s = "the-final--countdown";
  const text::unicode_regex dash("-", "test", text::unicode_regex::syntax::literal);
  const auto pieces = [&](text::split_behaviour behaviour) {
    std::vector<std::string> out;
    for (const auto& r : text::split_ranges(s.size(), dash.find_all(s), behaviour, false))
      out.push_back(s.substr(r.begin, r.end - r.begin));
    return out;
  };
  using v = std::vector<std::string>;
  CHECK(pieces(text::split_behaviour::removed) == v{"the", "final", "countdown"});
  CHECK(pieces(text::split_behaviour::isolated) == v{"the", "-", "final", "-", "-", "countdown"});
  CHECK(pieces(text::split_behaviour::merged_with_previous) == v{"the-", "final-", "-", "countdown"});
  CHECK(pieces(text::split_behaviour::merged_with_next) == v{"the", "-final", "-", "-countdown"});
  CHECK(pieces(text::split_behaviour::contiguous) == v{"the", "-", "final", "--", "countdown"});
}

TEST_CASE("byte-level characters and lossy UTF-8", "[text]") {
  CHECK(text::gpt2_byte_alphabet.encode(" \n!") == "\u0120\u010a!");
  CHECK(text::gpt2_byte_alphabet.decode("\u0120\u010a!") == std::optional<std::string>(" \n!"));
  CHECK_FALSE(text::gpt2_byte_alphabet.decode("\u2581").has_value());
  CHECK(text::utf8::from_bytes_lossy("a\xF0\x9F\x98"
                                     "b\xFF") == "a\uFFFDb\uFFFD");  // a cut emoji: one U+FFFD
}

TEST_CASE("a tokenizer.json of an unsupported kind fails naming the field and value", "[text]") {
  const auto error = [](std::string_view field, std::string_view replacement) {
    return error_of([&] { text::tokenizer::from_json(tiny_tokenizer_json(field, replacement)); });
  };
  CHECK(text::tokenizer::from_json(tiny_tokenizer_json()).encode("abba<end>", {}) ==
        std::vector<std::int32_t>{2, 1, 0, 3});
  // truncation and padding are left alone, as transformers leaves them unless a call asks.
  CHECK(text::tokenizer::from_json(tiny_tokenizer_json("truncation", R"({"max_length": 2})"))
            .encode("abba")
            .size() == 3);
  CHECK(contains(
      error("model", R"({"type": "WordPiece", "vocab": {}})"),
      "shardgraph: tokenizer: tokenizer.json: model.type \"WordPiece\" is not supported. Supported: BPE"));
  CHECK(contains(
      error("pre_tokenizer", R"({"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}]})"),
      "pre_tokenizer.pretokenizers[0].type \"Whitespace\" is not supported. Supported: Sequence, ByteLevel"));
  CHECK(contains(error("normalizer", R"({"type": "NFKC"})"), "normalizer.type \"NFKC\" is not supported"));
  CHECK(contains(error("decoder", R"({"type": "WordPiece", "prefix": "##"})"),
                 "decoder.type \"WordPiece\" is not supported"));
  CHECK(contains(error("post_processor", R"({"type": "BertProcessing"})"),
                 "post_processor.type \"BertProcessing\" is not supported"));
  CHECK(contains(error("model", R"({"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []})"),
                 "model.dropout"));
  CHECK(contains(error("model", R"({"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []})"),
                 "model.vocab gives the tokens \"a\" and \"b\" the same id 0"));
  CHECK(contains(error("model", R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]})"),
                 "model.merges[0] \"a b\": \"b\" is not in model.vocab"));
  CHECK(contains(
      error("pre_tokenizer", R"({"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"})"),
      "pre_tokenizer.pattern.Regex \"(a\" is not a regex PCRE2 accepts"));
  CHECK(contains(
      error("pre_tokenizer", R"({"type": "Split", "pattern": {"String": "a"}, "behavior": "Sideways"})"),
      "pre_tokenizer.behavior \"Sideways\" is not supported"));

  const auto tok = text::tokenizer::from_json(tiny_tokenizer_json());
  CHECK(contains(error_of([&] {
                   tok.decode(std::vector<std::int32_t>{0, 7});
                 }),
                 "shardgraph: tokenizer: id 7 is not a token of this tokenizer (vocab_size 4)"));
  CHECK(contains(error_of([&] { tok.encode("a\xC3"); }),
                 "shardgraph: tokenizer: the text to encode is not valid UTF-8"));
}
