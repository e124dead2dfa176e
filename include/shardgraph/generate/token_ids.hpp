#pragma once
// Token ids as generation passes them around: i64, as the models' `input_ids` input (HF's
// LongTensor), and the one check every id from outside gets: it lies in the vocabulary.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"

namespace shardgraph::generate {

using token_id = std::int64_t;

// Throws "<where>: <what> token <i> is <id>, outside the vocabulary [0, <vocab>)".
inline void check_token_ids(std::span<const token_id> ids, std::int64_t vocab, std::string_view where,
                            std::string_view what) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fail(where,
           std::string(what) + " token " + std::to_string(i) + " is " + std::to_string(ids[i]) +
               ", outside the vocabulary [0, " + std::to_string(vocab) + ")",
           "give ids of this model's tokenizer");
}

}  // namespace shardgraph::generate
