#pragma once
// Reads the parts of a tokenizer from HF's tokenizer.json (the `tokenizers` package's format),
// with io::json. What is read (docs/tokenizers.md lists it with the errors):
//   model          BPE: vocab, merges ("a b" strings or ["a", "b"] pairs), unk_token, fuse_unk,
//                  byte_fallback, ignore_merges
//   normalizer     null, Prepend, Replace, Sequence of them
//   pre_tokenizer  null, ByteLevel, Split, Metaspace, Digits, Sequence of them
//   post_processor null, TemplateProcessing (its "single" template), ByteLevel, Sequence of them
//   decoder        null, ByteLevel, ByteFallback, Fuse, Metaspace, Replace, Strip, Sequence of them
//   added_tokens   content, id, special, lstrip, rstrip, single_word, normalized
// Anything else fails naming the field and its value, e.g.
//   shardgraph: tokenizer: tokenizer.json: model.type "WordPiece" is not supported. ...
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/text/added_tokens.hpp"
#include "shardgraph/text/bpe_model.hpp"
#include "shardgraph/text/decoder.hpp"
#include "shardgraph/text/normalizer.hpp"
#include "shardgraph/text/post_processor.hpp"
#include "shardgraph/text/pre_tokenizer.hpp"
#include "shardgraph/text/unicode_regex.hpp"

namespace shardgraph::text {

class tokenizer_json_reader {
 public:
  using value = io::json::value;
  explicit tokenizer_json_reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void unsupported(const std::string& field, const std::string& found,
                                std::string_view supported) const {
    fail("tokenizer", source_ + ": " + field + " " + found + " is not supported",
         "Supported: " + std::string(supported) + " (docs/tokenizers.md)");
  }
  [[noreturn]] void invalid(const std::string& field, const std::string& why, std::string_view how) const {
    fail("tokenizer", source_ + ": " + field + " " + why, how);
  }

  // The "type" of a component, which must be one of `supported` (listed in the message).
  std::string type_of(const value& component, const std::string& field, std::string_view supported) const {
    const std::string& type = component.at("type").as_string();
    const std::string list = "," + std::string(supported) + ",";
    std::string spaced;
    for (const char c : supported) spaced += c == ',' ? std::string(", ") : std::string(1, c);
    if (list.find("," + type + ",") == std::string::npos) unsupported(field + ".type", quoted(type), spaced);
    return type;
  }
  static std::string quoted(const std::string& s) { return "\"" + s + "\""; }

  static bool flag(const value& component, std::string_view key, bool absent) {
    const value* v = component.find(key);
    return v && !v->is_null() ? v->as_bool() : absent;
  }

  // A {"String": "..."} or {"Regex": "..."} pattern.
  std::shared_ptr<const unicode_regex> pattern(const value& p, const std::string& field) const {
    if (const value* literal = p.find("String"))
      return std::make_shared<const unicode_regex>(literal->as_string(), field + ".String",
                                                   unicode_regex::syntax::literal);
    if (const value* regex = p.find("Regex"))
      return std::make_shared<const unicode_regex>(regex->as_string(), field + ".Regex");
    invalid(field, "has neither \"String\" nor \"Regex\"",
            "Give the pattern as {\"String\": ...} or {\"Regex\": ...}");
  }

  normalizer read_normalizer(const value* root) const {
    std::vector<normalizer_step> steps;
    if (root && !root->is_null()) add_normalizer(*root, "normalizer", steps);
    return normalizer(std::move(steps));
  }

  pre_tokenizer read_pre_tokenizer(const value* root) const {
    std::vector<pre_tokenizer_step> steps;
    if (root && !root->is_null()) add_pre_tokenizer(*root, "pre_tokenizer", steps);
    return pre_tokenizer(std::move(steps));
  }

  decoder read_decoder(const value* root) const {
    std::vector<decoder_step> steps;
    if (root && !root->is_null()) add_decoder(*root, "decoder", steps);
    return decoder(std::move(steps));
  }

  post_processor read_post_processor(const value* root) const {
    std::vector<post_processor::template_item> single;
    if (root && !root->is_null()) add_post_processor(*root, "post_processor", single);
    return post_processor(std::move(single));
  }

  std::vector<added_token> read_added_tokens(const value* list) const {
    std::vector<added_token> tokens;
    if (!list || list->is_null()) return tokens;
    for (const value& t : list->as_array()) {
      added_token token{t.at("content").as_string(),
                        token_id(t.at("id"), "added_tokens[].id"),
                        flag(t, "special", false),
                        flag(t, "single_word", false),
                        flag(t, "lstrip", false),
                        flag(t, "rstrip", false),
                        flag(t, "normalized", !flag(t, "special", false))};
      tokens.push_back(std::move(token));
    }
    return tokens;
  }

  bpe_model read_model(const value& model) const;

  std::int32_t token_id(const value& id, const std::string& field) const {
    const std::int64_t i = id.as_int();
    if (i < 0 || i > INT32_MAX)
      invalid(field, "is " + std::to_string(i) + ", outside 0..2^31-1",
              "Give token ids as non-negative 32-bit integers");
    return static_cast<std::int32_t>(i);
  }

 private:
  std::string source_;

  // Calls add(element, its field name) for each element of a Sequence's list `key`.
  template <class Add>
  static void for_each_in(const value& sequence, const char* key, const std::string& field, Add add) {
    const auto& list = sequence.at(key).as_array();
    for (std::size_t i = 0; i < list.size(); ++i)
      add(list[i], field + "." + key + "[" + std::to_string(i) + "]");
  }

  void add_normalizer(const value& n, const std::string& field, std::vector<normalizer_step>& steps) const;
  void add_pre_tokenizer(const value& p, const std::string& field,
                         std::vector<pre_tokenizer_step>& steps) const;
  void add_decoder(const value& d, const std::string& field, std::vector<decoder_step>& steps) const;
  void add_post_processor(const value& p, const std::string& field,
                          std::vector<post_processor::template_item>& single) const;
  prepend_scheme read_prepend_scheme(const value& m, const std::string& field) const;
  split_behaviour read_behaviour(const value& split, const std::string& field) const;
};

inline void tokenizer_json_reader::add_normalizer(const value& n, const std::string& field,
                                                  std::vector<normalizer_step>& steps) const {
  const std::string type = type_of(n, field, "Sequence,Prepend,Replace");
  if (type == "Sequence") {
    for_each_in(n, "normalizers", field,
                [&](const value& e, const std::string& f) { add_normalizer(e, f, steps); });
  } else if (type == "Prepend") {
    steps.push_back(prepend_normalizer{n.at("prepend").as_string()});
  } else {
    steps.push_back(
        replace_normalizer{pattern(n.at("pattern"), field + ".pattern"), n.at("content").as_string()});
  }
}

inline prepend_scheme tokenizer_json_reader::read_prepend_scheme(const value& m,
                                                                 const std::string& field) const {
  if (const value* scheme = m.find("prepend_scheme"); scheme && !scheme->is_null()) {
    const std::string& s = scheme->as_string();
    if (s == "always") return prepend_scheme::always;
    if (s == "first") return prepend_scheme::first;
    if (s == "never") return prepend_scheme::never;
    unsupported(field + ".prepend_scheme", quoted(s), "always, first, never");
  }
  return flag(m, "add_prefix_space", true) ? prepend_scheme::always : prepend_scheme::never;  // older files
}

inline split_behaviour tokenizer_json_reader::read_behaviour(const value& split,
                                                             const std::string& field) const {
  const std::string& b = split.at("behavior").as_string();
  if (b == "Removed") return split_behaviour::removed;
  if (b == "Isolated") return split_behaviour::isolated;
  if (b == "MergedWithPrevious") return split_behaviour::merged_with_previous;
  if (b == "MergedWithNext") return split_behaviour::merged_with_next;
  if (b == "Contiguous") return split_behaviour::contiguous;
  unsupported(field + ".behavior", quoted(b),
              "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

inline void tokenizer_json_reader::add_pre_tokenizer(const value& p, const std::string& field,
                                                     std::vector<pre_tokenizer_step>& steps) const {
  const std::string type = type_of(p, field, "Sequence,ByteLevel,Split,Metaspace,Digits");
  if (type == "Sequence") {
    for_each_in(p, "pretokenizers", field,
                [&](const value& e, const std::string& f) { add_pre_tokenizer(e, f, steps); });
  } else if (type == "ByteLevel") {
    std::shared_ptr<const unicode_regex> split_by;
    if (flag(p, "use_regex", true))
      split_by = std::make_shared<const unicode_regex>(gpt2_split_pattern, field);
    steps.push_back(byte_level_pre_tokenizer{flag(p, "add_prefix_space", true), std::move(split_by)});
  } else if (type == "Split") {
    steps.push_back(split_pre_tokenizer{pattern(p.at("pattern"), field + ".pattern"),
                                        read_behaviour(p, field), flag(p, "invert", false)});
  } else if (type == "Digits") {  // the package: each digit alone, or runs of digits
    const bool individual = flag(p, "individual_digits", false);
    steps.push_back(split_pre_tokenizer{std::make_shared<const unicode_regex>(R"(\p{N})", field),
                                        individual ? split_behaviour::isolated : split_behaviour::contiguous,
                                        false});
  } else {
    const std::string& replacement = p.at("replacement").as_string();
    if (utf8::sequence_length(replacement, 0) != replacement.size() || replacement.empty())
      invalid(field + ".replacement", quoted(replacement) + " is not one character",
              "Give one character, e.g. \"\u2581\"");
    steps.push_back(metaspace_pre_tokenizer{
        replacement,
        std::make_shared<const unicode_regex>(replacement, field, unicode_regex::syntax::literal),
        read_prepend_scheme(p, field), flag(p, "split", true)});
  }
}

inline void tokenizer_json_reader::add_decoder(const value& d, const std::string& field,
                                               std::vector<decoder_step>& steps) const {
  const std::string type = type_of(d, field, "Sequence,ByteLevel,ByteFallback,Fuse,Metaspace,Replace,Strip");
  if (type == "Sequence") {
    for_each_in(d, "decoders", field,
                [&](const value& e, const std::string& f) { add_decoder(e, f, steps); });
  } else if (type == "ByteLevel") {
    steps.push_back(byte_level_decoder{});
  } else if (type == "ByteFallback") {
    steps.push_back(byte_fallback_decoder{});
  } else if (type == "Fuse") {
    steps.push_back(fuse_decoder{});
  } else if (type == "Metaspace") {
    steps.push_back(metaspace_decoder{d.at("replacement").as_string(),
                                      read_prepend_scheme(d, field) != prepend_scheme::never});
  } else if (type == "Replace") {
    steps.push_back(
        replace_decoder{pattern(d.at("pattern"), field + ".pattern"), d.at("content").as_string()});
  } else {
    const auto count = [&](std::string_view key) {
      const std::int64_t n = d.at(key).as_int();
      if (n < 0)
        invalid(field + "." + std::string(key), "is negative", "Give a count of characters to strip");
      return static_cast<std::size_t>(n);
    };
    steps.push_back(strip_decoder{d.at("content").as_string(), count("start"), count("stop")});
  }
}

inline void tokenizer_json_reader::add_post_processor(
    const value& p, const std::string& field, std::vector<post_processor::template_item>& single) const {
  const std::string type = type_of(p, field, "Sequence,TemplateProcessing,ByteLevel");
  if (type == "Sequence") {
    for_each_in(p, "processors", field,
                [&](const value& e, const std::string& f) { add_post_processor(e, f, single); });
  } else if (type == "TemplateProcessing") {
    if (!single.empty())
      invalid(field, "is a second TemplateProcessing", "Keep one TemplateProcessing in the post_processor");
    const value& special_tokens = p.at("special_tokens");
    for (const value& item : p.at("single").as_array()) {
      if (item.contains("Sequence")) {
        single.push_back({true, {}});
        continue;
      }
      const std::string& name = item.at("SpecialToken").at("id").as_string();
      const value* special = special_tokens.find(name);
      if (!special)
        invalid(field + ".single", "names the special token " + quoted(name) + ", which special_tokens lacks",
                "Add it to the post_processor's special_tokens");
      post_processor::template_item token{false, {}};
      for (const value& id : special->at("ids").as_array())
        token.ids.push_back(token_id(id, field + ".special_tokens"));
      single.push_back(std::move(token));
    }
  }
  // ByteLevel: trims offsets, which encode() does not return; the ids stay as they are.
}

inline bpe_model tokenizer_json_reader::read_model(const value& model) const {
  type_of(model, "model", "BPE");
  if (const value* dropout = model.find("dropout"); dropout && !dropout->is_null())
    unsupported("model.dropout", std::to_string(dropout->as_double()), "null (encoding is deterministic)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const value* v = model.find(affix); v && !v->is_null() && !v->as_string().empty())
      unsupported(std::string("model.") + affix, quoted(v->as_string()),
                  "null (byte-level and SentencePiece BPE)");
  std::vector<std::pair<std::string, std::int32_t>> vocabulary;
  for (const auto& [token, id] : model.at("vocab").as_object())
    vocabulary.emplace_back(token, token_id(id, "model.vocab[" + quoted(token) + "]"));
  std::vector<bpe_merge> merges;
  for (const value& m : model.at("merges").as_array()) {
    if (m.type() == io::json::kind::array) {
      if (m.as_array().size() != 2)
        invalid("model.merges", "holds a pair of " + std::to_string(m.as_array().size()) + " tokens",
                "Give each merge as two tokens");
      merges.push_back({m.at(0).as_string(), m.at(1).as_string()});
      continue;
    }
    const std::string& line = m.as_string();
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      invalid("model.merges", "holds " + quoted(line) + ", not two tokens separated by one space",
              "Give each merge as \"left right\"");
    merges.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  bpe_options options;
  if (const value* unk = model.find("unk_token"); unk && !unk->is_null())
    options.unknown_token = unk->as_string();
  options.fuse_unknown = flag(model, "fuse_unk", false);
  options.byte_fallback = flag(model, "byte_fallback", false);
  options.ignore_merges = flag(model, "ignore_merges", false);
  return bpe_model(vocabulary, merges, std::move(options));
}

}  // namespace shardgraph::text
