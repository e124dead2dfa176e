#pragma once
// token_codec: text <-> token ids as generation needs them, without naming a tokenizer: the llm
// (generate/llm.hpp) encodes text prompts, decodes what it generated and streams text pieces
// through it. text/tokenizer_codec.hpp implements it with the tokenizer of a tokenizer.json (the
// core does not include text/, which needs PCRE2).
//
//   std::shared_ptr<const token_codec> codec = text::open_tokenizer_codec(directory);
//   codec->encode("Hello")                     // ids, with the special tokens its template adds (BOS)
//   auto stream = codec->stream();
//   for (token_id id : generated) std::cout << stream->step(id);   // "" inside a character
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/generate/token_ids.hpp"

namespace shardgraph::generate {

// Text for ids that come one at a time. step(id) returns the text the id completes; the pieces
// joined are codec.decode(ids) up to the last complete character.
class token_stream {
 public:
  virtual ~token_stream() = default;
  virtual std::string step(token_id id) = 0;
};

// Contract: const members may be called from several threads at once.
class token_codec {
 public:
  virtual ~token_codec() = default;
  // Throws shardgraph::error for text it cannot encode (not UTF-8).
  virtual std::vector<token_id> encode(std::string_view text) const = 0;
  virtual std::string decode(std::span<const token_id> ids) const = 0;
  virtual std::unique_ptr<token_stream> stream() const = 0;
};

}  // namespace shardgraph::generate
