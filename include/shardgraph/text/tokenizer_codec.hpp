#pragma once
// tokenizer_codec: a tokenizer (tokenizer.json) as the llm's token_codec (generate/token_codec.hpp).
//
//   auto codec = shardgraph::text::open_tokenizer_codec("gpt2-dir");   // null without tokenizer.json
//   shardgraph::generate::llm<...> model("gpt2-dir", options, codec);
//
// Prompts are encoded with the special tokens the post-processor adds (LLaMA's BOS), as HF's
// tokenizer(text) does; generated ids are decoded, and streamed, leaving out the special tokens
// (vLLM's skip_special_tokens = true) unless decode_options say otherwise.
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/generate/token_codec.hpp"
#include "shardgraph/text/decode_stream.hpp"
#include "shardgraph/text/tokenizer.hpp"

namespace shardgraph::text {

class tokenizer_codec final : public generate::token_codec {
 public:
  explicit tokenizer_codec(tokenizer tok, decode_options decoding = {.skip_special_tokens = true})
      : tokenizer_(std::move(tok)), decoding_(decoding) {}

  std::vector<generate::token_id> encode(std::string_view text) const override {
    const std::vector<std::int32_t> ids = tokenizer_.encode(text);
    return {ids.begin(), ids.end()};
  }
  std::string decode(std::span<const generate::token_id> ids) const override {
    return tokenizer_.decode(narrow(ids), decoding_);
  }
  std::unique_ptr<generate::token_stream> stream() const override {
    return std::make_unique<stream_of_tokenizer>(tokenizer_, decoding_);
  }
  const tokenizer& text_tokenizer() const { return tokenizer_; }

 private:
  class stream_of_tokenizer final : public generate::token_stream {
   public:
    stream_of_tokenizer(const tokenizer& tok, decode_options decoding) : stream_(tok, decoding) {}
    std::string step(generate::token_id id) override {
      return stream_.step(narrow_one(id)).value_or(std::string{});
    }

   private:
    decode_stream stream_;
  };

  static std::int32_t narrow_one(generate::token_id id) {
    if (id < 0 || id > std::numeric_limits<std::int32_t>::max())
      fail("tokenizer", "token id " + std::to_string(id) + " is outside the tokenizer's ids",
           "give ids of this tokenizer's vocabulary");
    return static_cast<std::int32_t>(id);
  }
  static std::vector<std::int32_t> narrow(std::span<const generate::token_id> ids) {
    std::vector<std::int32_t> out;
    out.reserve(ids.size());
    for (const generate::token_id id : ids) out.push_back(narrow_one(id));
    return out;
  }

  tokenizer tokenizer_;
  decode_options decoding_;
};

// The codec of `directory`/tokenizer.json, or null when the directory has none (a checkpoint
// generated from token ids only). Throws for a tokenizer.json it cannot read.
inline std::shared_ptr<const generate::token_codec> open_tokenizer_codec(const std::string& directory) {
  const std::string path = directory + "/tokenizer.json";
  if (!std::filesystem::exists(path)) return nullptr;
  return std::make_shared<const tokenizer_codec>(tokenizer::from_file(path));
}

}  // namespace shardgraph::text
