#pragma once
// decode_stream: text for ids that come one at a time (generation), as the `tokenizers`
// package's DecodeStream gives it. step(id) returns the text the id completes, or none while the
// text so far ends inside a character (the first bytes of an emoji under byte-level BPE or
// byte fallback). The concatenation of what step() returned is the decode of all the ids, up to
// the last id that completed a character; only a window of the last few ids is decoded each step.
//
//   text::decode_stream stream(tok);
//   for (std::int32_t id : generated)
//     if (std::optional<std::string> piece = stream.step(id)) std::cout << *piece << std::flush;
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/text/tokenizer.hpp"

namespace shardgraph::text {

class decode_stream {
 public:
  // Contract: `tok` outlives the stream.
  explicit decode_stream(const tokenizer& tok, decode_options options = {})
      : tokenizer_(&tok), options_(options) {}

  // Fails, as decode() does, on an id that is no token's.
  std::optional<std::string> step(std::int32_t id) {
    ids_.push_back(id);
    const std::string text = tokenizer_->decode(ids_, options_);
    if (text.size() <= prefix_.size() || text.ends_with(utf8::replacement_character)) return std::nullopt;
    if (!text.starts_with(prefix_))
      fail("tokenizer",
           "decode_stream: the text of the last ids no longer begins with the text already returned",
           "This tokenizer's decoder rewrites earlier text; decode the whole sequence with decode() instead");
    std::string added = text.substr(prefix_.size());
    // Keep the ids from the previous window's end on: the decoder sees them as context, so that
    // e.g. a '▁' at a window's start still decodes as a space.
    const std::size_t new_prefix_index = ids_.size() - prefix_index_;
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
    prefix_ = tokenizer_->decode(ids_, options_);
    prefix_index_ = new_prefix_index;
    return added;
  }

 private:
  const tokenizer* tokenizer_;
  decode_options options_;
  std::vector<std::int32_t> ids_;  // the window: context ids, then those not yet returned
  std::string prefix_;             // the decode of the window's ids already returned
  std::size_t prefix_index_ = 0;   // ids_[0, prefix_index_) is context only
};

}  // namespace shardgraph::text
