#pragma once
// The normalizer of tokenizer.json that SentencePiece-style tokenizers use (LLaMA-2, TinyLlama):
// a sequence of Prepend and Replace steps, applied to each stretch of text between added tokens.
//
//   Sequence[Prepend("▁"), Replace(" " -> "▁")]:   "Hello world"  ->  "▁Hello▁world"
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "shardgraph/text/unicode_regex.hpp"

namespace shardgraph::text {

struct prepend_normalizer {
  std::string prefix;  // added in front of non-empty text
};
struct replace_normalizer {
  std::shared_ptr<const unicode_regex> pattern;  // a literal string or a regex
  std::string content;
};
using normalizer_step = std::variant<prepend_normalizer, replace_normalizer>;

class normalizer {
 public:
  normalizer() = default;  // none: text passes unchanged
  explicit normalizer(std::vector<normalizer_step> steps) : steps_(std::move(steps)) {}

  bool empty() const { return steps_.empty(); }

  std::string apply(std::string text) const {
    for (const normalizer_step& step : steps_) {
      if (const auto* prepend = std::get_if<prepend_normalizer>(&step)) {
        if (!text.empty()) text.insert(0, prepend->prefix);
      } else {
        const auto& replace = std::get<replace_normalizer>(step);
        text = replace.pattern->replace_all(text, replace.content);
      }
    }
    return text;
  }

 private:
  std::vector<normalizer_step> steps_;
};

}  // namespace shardgraph::text
