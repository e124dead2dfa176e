#pragma once
// shardgraph::text::tokenizer: text <-> token ids as HF's fast tokenizers do, read from their
// tokenizer.json. Byte-level BPE (GPT-2, LLaMA-3) and SentencePiece-style BPE with byte fallback
// (LLaMA-2, TinyLlama); docs/tokenizers.md lists what is supported. Link shardgraph::text (PCRE2).
//
//   auto tok = shardgraph::text::tokenizer::from_file("gpt2/tokenizer.json");
//   std::vector<std::int32_t> ids = tok.encode("Hello world", {.add_special_tokens = false});
//   tok.decode(ids)                 // "Hello world"
//   tok.token_id("<|endoftext|>")   // 50256
//
// encode(text): (1) added tokens are found in the raw text and kept whole (added_tokens.hpp);
// (2) each stretch between them is normalized (normalizer.hpp), then searched for the added
// tokens marked normalized; (3) pre-tokenized into words (pre_tokenizer.hpp); (4) each word
// encoded by BPE (bpe_model.hpp); (5) with add_special_tokens, the post-processor's template
// adds its special tokens (LLaMA's BOS).
// A tokenizer is immutable once read; its const members may be called from several threads.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/file_contents.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/text/tokenizer_json.hpp"

namespace shardgraph::text {

struct encode_options {
  bool add_special_tokens = true;  // apply the post-processor (the BOS of LLaMA-style templates)
};
struct decode_options {
  bool skip_special_tokens = false;  // leave out the added tokens marked special
};

class tokenizer {
 public:
  static tokenizer from_file(const std::string& path) {
    const io::file_contents file = io::file_contents::open(path);
    const auto bytes = file.bytes();
    return from_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
  }

  // `source` names the text in messages (a path).
  static tokenizer from_json(std::string_view json_text, const std::string& source = "tokenizer.json") {
    const io::json::value root = io::json::parse(json_text, source);
    return tokenizer(root, tokenizer_json_reader(source));
  }

  std::vector<std::int32_t> encode(std::string_view text, encode_options options = {}) const {
    if (!utf8::is_valid(text))
      fail("tokenizer", "the text to encode is not valid UTF-8", "Convert it to UTF-8 before encoding");
    std::vector<std::int32_t> ids;
    for (const text_segment& raw : raw_splitter_.split(text)) {
      if (raw.token_id >= 0) {
        ids.push_back(raw.token_id);
        continue;
      }
      const std::string normalized =
          normalizer_.apply(std::string(text.substr(raw.range.begin, raw.range.end - raw.range.begin)));
      for (const text_segment& piece : normalized_splitter_.split(normalized)) {
        if (piece.token_id >= 0) {
          ids.push_back(piece.token_id);
          continue;
        }
        const bool starts_input = raw.range.begin == 0 && piece.range.begin == 0;
        const std::string_view stretch =
            std::string_view(normalized).substr(piece.range.begin, piece.range.end - piece.range.begin);
        for (const text_piece& word : pre_tokenizer_.apply({std::string(stretch), starts_input}))
          model_.encode_word(word.text, ids);
      }
    }
    return options.add_special_tokens ? post_processor_.apply(std::move(ids)) : ids;
  }

  // Fails on an id that is no token's (naming it), rather than skipping it as the package does.
  std::string decode(std::span<const std::int32_t> ids, decode_options options = {}) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const std::int32_t id : ids) {
      const std::optional<std::string_view> t = token(id);
      if (!t)
        fail("tokenizer",
             "id " + std::to_string(id) + " is not a token of this tokenizer (vocab_size " +
                 std::to_string(vocab_size()) + ")",
             "Decode only ids that this tokenizer or a model with its vocabulary made");
      if (!(options.skip_special_tokens && special_ids_.contains(id))) tokens.emplace_back(*t);
    }
    return decoder_.apply(std::move(tokens));
  }

  // The id of a token (an added token, or one of the model's vocabulary), e.g. "<|endoftext|>".
  std::optional<std::int32_t> token_id(std::string_view token) const {
    if (const auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
    return model_.token_id(token);
  }
  // The token of an id, as tokenizer.json spells it (byte-level tokens in their characters: "Ġworld").
  std::optional<std::string_view> token(std::int32_t id) const {
    if (const auto it = added_contents_.find(id); it != added_contents_.end()) return it->second;
    if (const std::string* t = model_.token(id)) return *t;
    return std::nullopt;
  }
  bool is_special(std::int32_t id) const { return special_ids_.contains(id); }

  // The number of distinct tokens, added ones included (the package's get_vocab_size(True), HF's
  // len(tokenizer)).
  std::size_t vocab_size() const { return vocab_size_; }

 private:
  normalizer normalizer_;
  pre_tokenizer pre_tokenizer_;
  bpe_model model_;
  post_processor post_processor_;
  decoder decoder_;
  added_token_splitter raw_splitter_, normalized_splitter_;
  token_ids added_ids_;
  std::unordered_map<std::int32_t, std::string> added_contents_;
  std::unordered_set<std::int32_t> special_ids_;
  std::size_t vocab_size_ = 0;

  tokenizer(const io::json::value& root, const tokenizer_json_reader& reader)
      : normalizer_(reader.read_normalizer(root.find("normalizer"))),
        pre_tokenizer_(reader.read_pre_tokenizer(root.find("pre_tokenizer"))),
        model_(reader.read_model(root.at("model"))),
        post_processor_(reader.read_post_processor(root.find("post_processor"))),
        decoder_(reader.read_decoder(root.find("decoder"))) {
    // "truncation" and "padding" are left alone, as transformers' tokenizers leave them unless a
    // call asks for them: encode() neither cuts nor pads.
    std::vector<added_token_splitter::pattern> raw, normalized;
    for (added_token& t : reader.read_added_tokens(root.find("added_tokens"))) {
      added_ids_.insert_or_assign(t.content, t.id);
      // The package spells a normalized added token, in token() and decode(), as normalized.
      added_contents_.insert_or_assign(t.id, t.normalized ? normalizer_.apply(t.content) : t.content);
      if (t.special) special_ids_.insert(t.id);
      if (t.normalized)  // matched after normalization, as the package does, normalizer or none
        normalized.push_back({normalizer_.apply(t.content), t});
      else
        raw.push_back({t.content, t});
    }
    raw_splitter_ = added_token_splitter(std::move(raw));
    normalized_splitter_ = added_token_splitter(std::move(normalized));
    vocab_size_ = model_.size();
    for (const auto& [content, id] : added_ids_) vocab_size_ += model_.token_id(content) ? 0 : 1;
  }
};

}  // namespace shardgraph::text
