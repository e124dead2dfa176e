#pragma once
// The BPE model of tokenizer.json: a vocabulary (token -> id) and ranked merges. A word is split
// into its characters, then the adjacent pair of lowest merge rank is merged, again and again,
// until no pair of the word has a merge:
//   merges ["l o", "lo w", "e r"]:   l o w e r  ->  lo w e r  ->  low e r  ->  low er
// A character the vocabulary lacks becomes its UTF-8 bytes as "<0xNN>" tokens (byte_fallback),
// else the unknown token (consecutive ones fused into one with fuse_unk), else nothing, as in the
// `tokenizers` package. With ignore_merges (LLaMA-3) a word that is itself a token is not split.
// Merging keeps a heap of candidate pairs keyed by (rank, position): O(n log n) for a word of n
// characters; merge ranks are found in a hash map of id pairs.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/text/utf8.hpp"

namespace shardgraph::text {

struct bpe_options {
  std::optional<std::string> unknown_token;  // model.unk_token
  bool fuse_unknown = false;                 // model.fuse_unk
  bool byte_fallback = false;
  bool ignore_merges = false;
};

// Hashes std::string and std::string_view alike, so that lookups by string_view allocate nothing.
struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using token_ids = std::unordered_map<std::string, std::int32_t, string_hash, std::equal_to<>>;

struct bpe_merge {
  std::string left, right;  // the merged token is left + right
};

class bpe_model {
 public:
  // Contract: ids are >= 0 (tokenizer_json.hpp checks). Fails naming two tokens of one id, or the
  // merge whose parts or result are not in the vocabulary.
  bpe_model(const std::vector<std::pair<std::string, std::int32_t>>& vocabulary,
            const std::vector<bpe_merge>& merges, bpe_options options)
      : options_(std::move(options)) {
    for (const auto& [token, id] : vocabulary) {
      ids_.emplace(token, id);
      if (const auto [it, added] = tokens_.emplace(id, token); !added)
        fail("tokenizer",
             "model.vocab gives the tokens \"" + it->second + "\" and \"" + token + "\" the same id " +
                 std::to_string(id),
             "Give each token of the vocabulary its own id");
    }
    for (std::size_t rank = 0; rank < merges.size(); ++rank)
      add_merge(merges[rank], static_cast<std::int32_t>(rank));
    if (options_.unknown_token) {
      unknown_id_ = token_id(*options_.unknown_token);
      if (!unknown_id_)
        fail("tokenizer", "model.unk_token \"" + *options_.unknown_token + "\" is not in model.vocab",
             "Add it to the vocabulary or set unk_token to null");
    }
    if (options_.byte_fallback)
      for (unsigned b = 0; b < 256; ++b)
        byte_ids_[b] = token_id(byte_token(static_cast<unsigned char>(b))).value_or(-1);
  }

  std::optional<std::int32_t> token_id(std::string_view token) const {
    const auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  // The token of `id`, or null when the vocabulary has no such id.
  const std::string* token(std::int32_t id) const {
    const auto it = tokens_.find(id);
    return it == tokens_.end() ? nullptr : &it->second;
  }
  std::size_t size() const { return ids_.size(); }
  const token_ids& vocabulary() const { return ids_; }

  // "<0x0A>" for byte 10: the token of a byte under byte_fallback.
  static std::string byte_token(unsigned char byte) {
    constexpr std::string_view hex = "0123456789ABCDEF";
    return std::string("<0x") + hex[byte >> 4] + hex[byte & 15] + ">";
  }

  // Appends the ids of `word` (a piece the pre-tokenizer made; UTF-8) to `ids`.
  void encode_word(std::string_view word, std::vector<std::int32_t>& ids) const {
    if (options_.ignore_merges)
      if (const auto whole = token_id(word)) return ids.push_back(*whole);
    std::vector<symbol> symbols = initial_symbols(word);
    merge_pairs(symbols);
    for (const symbol& s : symbols)
      if (!s.merged_away) ids.push_back(s.id);
  }

 private:
  struct merge_result {
    std::int32_t rank, id;
  };
  struct symbol {
    std::int32_t id;
    int previous, next;  // neighbours still in the word; -1 at the ends
    bool merged_away = false;
  };

  bpe_options options_;
  token_ids ids_;
  std::unordered_map<std::int32_t, std::string> tokens_;  // by id; ids need not be contiguous
  std::unordered_map<std::uint64_t, merge_result> merges_;
  std::optional<std::int32_t> unknown_id_;
  std::int32_t byte_ids_[256] = {};  // -1: the byte has no token

  static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }

  void add_merge(const bpe_merge& merge, std::int32_t rank) {
    const auto left = token_id(merge.left), right = token_id(merge.right);
    const auto merged = token_id(merge.left + merge.right);
    if (!left || !right || !merged)
      fail("tokenizer",
           "model.merges[" + std::to_string(rank) + "] \"" + merge.left + " " + merge.right + "\": \"" +
               (!left    ? merge.left
                : !right ? merge.right
                         : merge.left + merge.right) +
               "\" is not in model.vocab",
           "Give the tokenizer.json that was saved with these merges; the vocabulary must hold both parts "
           "and their merge");
    merges_.insert_or_assign(pair_key(*left, *right),
                             merge_result{rank, *merged});  // a repeated merge: its last rank
  }

  std::vector<symbol> initial_symbols(std::string_view word) const {
    std::vector<symbol> symbols;
    const auto add = [&](std::int32_t id) {
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({id, index - 1, -1});
      if (index > 0) symbols[static_cast<std::size_t>(index) - 1].next = index;
    };
    std::int32_t pending_unknown = -1;  // the unknown token waiting for the next known character; -1: none
    for (std::size_t pos = 0; pos < word.size();) {
      const std::size_t n = std::max<std::size_t>(1, utf8::sequence_length(word, pos));
      const std::string_view character = word.substr(pos, n);
      pos += n;
      if (const auto id = token_id(character)) {
        if (pending_unknown >= 0) add(pending_unknown), pending_unknown = -1;
        add(*id);
      } else if (options_.byte_fallback && all_bytes_have_tokens(character)) {
        for (const char c : character) add(byte_ids_[static_cast<unsigned char>(c)]);  // the package's order
      } else if (unknown_id_) {
        if (pending_unknown >= 0 && !options_.fuse_unknown) add(pending_unknown);
        pending_unknown = *unknown_id_;
      }
    }
    if (pending_unknown >= 0) add(pending_unknown);
    return symbols;
  }

  bool all_bytes_have_tokens(std::string_view character) const {
    for (const char c : character)
      if (byte_ids_[static_cast<unsigned char>(c)] < 0) return false;
    return true;
  }

  std::optional<merge_result> merge_of(std::int32_t left, std::int32_t right) const {
    const auto it = merges_.find(pair_key(left, right));
    if (it == merges_.end()) return std::nullopt;
    return it->second;
  }

  void merge_pairs(std::vector<symbol>& symbols) const {
    struct candidate {
      std::int32_t rank;
      int position;  // of the left symbol
      std::int32_t result;
      bool operator>(const candidate& o) const {
        return rank != o.rank ? rank > o.rank : position > o.position;
      }
    };
    std::priority_queue<candidate, std::vector<candidate>, std::greater<>> queue;
    const auto push_pair = [&](int left) {
      if (left < 0) return;
      const int right = symbols[static_cast<std::size_t>(left)].next;
      if (right < 0) return;
      if (const auto m = merge_of(symbols[static_cast<std::size_t>(left)].id,
                                  symbols[static_cast<std::size_t>(right)].id))
        queue.push({m->rank, left, m->id});
    };
    for (int i = 0; i < static_cast<int>(symbols.size()); ++i) push_pair(i);
    while (!queue.empty()) {
      const candidate top = queue.top();
      queue.pop();
      symbol& left = symbols[static_cast<std::size_t>(top.position)];
      if (left.merged_away || left.next < 0) continue;
      symbol& right = symbols[static_cast<std::size_t>(left.next)];
      const auto current = merge_of(left.id, right.id);
      if (!current || current->id != top.result) continue;  // the pair changed since it was queued
      left.id = top.result;
      right.merged_away = true;
      left.next = right.next;
      if (left.next >= 0) symbols[static_cast<std::size_t>(left.next)].previous = top.position;
      push_pair(left.previous);
      push_pair(top.position);
    }
  }
};

}  // namespace shardgraph::text
