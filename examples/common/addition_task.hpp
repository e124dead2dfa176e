#pragma once
// addition_task: the examples' training task, so that training shows real learning with no download.
// Multi-digit addition written as tokens, examples back to back in one stream:
//
//   "12+345=753;"   means 12 + 345 = 357: the answer is written REVERSED, least significant digit first.
//
// Why reversed: a causal model writes the answer one digit at a time, left to right. Least significant
// digit first, each answer digit depends only on the two operand digits of the same place and the
// carry out of the previous place, which the model has just written; most significant first, the
// first digit depends on the carries out of every lower place, which a small model cannot work out in
// one step. Small transformers learn the reversed form quickly and to high accuracy.
//
// Vocabulary (vocab_size = 14): ids 0-9 the digits, 10 '+', 11 '=', 12 ';' (end of an example),
// 13 pad (never in a stream; for padding prompts of single examples). Operands are written most
// significant digit first with no leading zeros; each has a digit count drawn uniformly from
// [1, max_digits], then a value uniform among the numbers of that many digits (0 counts as one digit).
//
// Held out: an unordered pair {a, b} is held out when mix64(min(a, b) << 32 | max(a, b)) % 100 <
// held_out_percent (mix64: shardgraph/data/splitmix64.hpp). The split depends on neither the seed
// nor the order of the operands, so a held-out sum is never trained on, as a + b or as b + a, under
// any seed.
//
//   addition_task task{.max_digits = 3, .seed = 1};
//   write_token_file("train.bin", task.make_stream(100000, false), 1);
//   write_token_file("heldout.bin", task.make_stream(2000, true), 1);
//   auto mask = task.answer_mask(batch["input_ids"], batch["targets"]);   // which targets to score
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/data/splitmix64.hpp"

namespace shardgraph::examples {

struct addition_task {
  int max_digits = 3;         // digits of each operand at most: 1 to 9
  std::uint64_t seed = 0;     // chooses the examples of a stream, not the train/held-out split
  int held_out_percent = 10;  // share of operand pairs kept for evaluation: 1 to 99

  static constexpr std::int64_t plus_token = 10;
  static constexpr std::int64_t equals_token = 11;
  static constexpr std::int64_t end_token = 12;
  static constexpr std::int64_t pad_token = 13;
  static constexpr int vocab_size = 14;

  // Whether the pair {a, b} belongs to the held-out set (see above).
  bool is_held_out(std::int64_t a, std::int64_t b) const {
    const auto low = static_cast<std::uint64_t>(std::min(a, b)),
               high = static_cast<std::uint64_t>(std::max(a, b));
    return data::mix64((low << 32) | high) % 100 < static_cast<std::uint64_t>(held_out_percent);
  }

  // The tokens of one example, "a+b=" then the digits of a + b reversed, then ';'. a, b >= 0.
  static std::vector<std::int64_t> example(std::int64_t a, std::int64_t b) {
    if (a < 0 || b < 0 || a > 0xffffffffll || b > 0xffffffffll)
      fail("addition_task::example",
           "operands " + std::to_string(a) + " and " + std::to_string(b) + " are outside [0, 2^32)",
           "Add numbers of at most 9 digits");
    std::vector<std::int64_t> tokens;
    append_digits(tokens, a);
    tokens.push_back(plus_token);
    append_digits(tokens, b);
    tokens.push_back(equals_token);
    std::int64_t sum = a + b;
    do {
      tokens.push_back(sum % 10);
      sum /= 10;
    } while (sum > 0);
    tokens.push_back(end_token);
    return tokens;
  }

  // `examples` examples back to back, all from the training pairs or all from the held-out pairs.
  // Deterministic in (seed, held_out, max_digits, held_out_percent): the generator is
  // splitmix64(seed ^ mix64(held_out ? 2 : 1)), and each operand takes one below() for its digit
  // count and one for its value; a pair from the other set is drawn again.
  std::vector<std::int64_t> make_stream(std::int64_t examples, bool held_out) const {
    check();
    if (examples < 0)
      fail("addition_task::make_stream", "examples is " + std::to_string(examples) + ", negative",
           "Ask for zero or more examples");
    data::splitmix64 rng(seed ^ data::mix64(held_out ? 2 : 1));
    std::vector<std::int64_t> stream;
    stream.reserve(static_cast<std::size_t>(examples) * static_cast<std::size_t>(3 * max_digits + 4));
    constexpr int attempts = 1 << 20;  // a set with no pair of these sizes would otherwise loop forever
    for (std::int64_t e = 0; e < examples; ++e) {
      for (int attempt = 0;; ++attempt) {
        if (attempt == attempts)
          fail("addition_task::make_stream",
               "no " + std::string(held_out ? "held-out" : "training") + " pair found in " +
                   std::to_string(attempts) + " draws with max_digits " + std::to_string(max_digits) +
                   " and held_out_percent " + std::to_string(held_out_percent),
               "Raise max_digits, or move held_out_percent away from 0 and 100");
        const std::int64_t a = operand(rng), b = operand(rng);
        if (is_held_out(a, b) != held_out) continue;
        const std::vector<std::int64_t> tokens = example(a, b);
        stream.insert(stream.end(), tokens.begin(), tokens.end());
        break;
      }
    }
    return stream;
  }

  // For a window of seq + 1 tokens of a stream (inputs window[0, seq), targets window[1, seq]): the
  // (seq) target positions that are answer digits, those after '=' and before ';'. An answer counts only
  // when its whole example lies in the window, after a ';' in it: the model sees only the window, so
  // an example cut at the window's start is not answerable and is left out. The ';' is not counted.
  static std::vector<bool> answer_mask(std::span<const std::int64_t> window) {
    if (window.empty())
      fail("addition_task::answer_mask", "the window is empty",
           "Pass seq + 1 tokens: the inputs and the last target");
    std::vector<bool> mask(window.size() - 1, false);
    bool whole_example = false, in_answer = false;
    for (std::size_t i = 0; i < window.size(); ++i) {
      const std::int64_t token = window[i];
      if (token == end_token) {
        whole_example = true;
        in_answer = false;
      } else if (token == equals_token) {
        in_answer = whole_example;
      } else if (token >= 0 && token <= 9) {
        if (in_answer && i >= 1) mask[i - 1] = true;
      } else {
        in_answer = false;
      }
    }
    return mask;
  }

  // The mask of a batch: input_ids and targets (batch, seq) i64, as batch_loader gives them; row i's
  // window is input_ids[i, 0] followed by targets[i, :]. Returns (batch * seq), row-major.
  static std::vector<bool> answer_mask(const host_tensor& input_ids, const host_tensor& targets) {
    if (input_ids.shape().size() != 2 || input_ids.shape() != targets.shape())
      fail("addition_task::answer_mask", "input_ids and targets must both be (batch, seq)",
           "Pass the two tensors of one batch");
    const std::int64_t rows = input_ids.shape()[0], seq = input_ids.shape()[1];
    const auto inputs = input_ids.values<std::int64_t>();
    const auto next = targets.values<std::int64_t>();
    std::vector<bool> mask;
    mask.reserve(static_cast<std::size_t>(rows * seq));
    std::vector<std::int64_t> window(static_cast<std::size_t>(seq + 1));
    for (std::int64_t r = 0; r < rows; ++r) {
      window[0] = inputs[static_cast<std::size_t>(r * seq)];
      std::copy_n(next.begin() + r * seq, seq, window.begin() + 1);
      const std::vector<bool> row = answer_mask(window);
      mask.insert(mask.end(), row.begin(), row.end());
    }
    return mask;
  }

  // Readable text: "12+345=753;" (pad prints as '_', an id outside the vocabulary as '?').
  static std::string decode(std::span<const std::int64_t> tokens) {
    constexpr std::string_view symbols = "0123456789+=;_";  // indexed by token id
    static_assert(symbols.size() == vocab_size);
    std::string text;
    text.reserve(tokens.size());
    for (const std::int64_t t : tokens)
      text += t >= 0 && t < vocab_size ? symbols[static_cast<std::size_t>(t)] : '?';
    return text;
  }

 private:
  void check() const {
    if (max_digits < 1 || max_digits > 9)
      fail("addition_task", "max_digits is " + std::to_string(max_digits) + ", outside [1, 9]",
           "Use 1 to 9 digits (sums must fit the pair hash)");
    if (held_out_percent < 1 || held_out_percent > 99)
      fail("addition_task", "held_out_percent is " + std::to_string(held_out_percent) + ", outside [1, 99]",
           "Keep some pairs for training and some for evaluation");
  }

  std::int64_t operand(data::splitmix64& rng) const {
    const int digits = 1 + static_cast<int>(rng.below(static_cast<std::uint64_t>(max_digits)));
    std::int64_t high = 10;
    for (int d = 1; d < digits; ++d) high *= 10;
    const std::int64_t low = digits == 1 ? 0 : high / 10;  // [low, high): the numbers of `digits` digits
    return low + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(high - low)));
  }

  static void append_digits(std::vector<std::int64_t>& tokens, std::int64_t n) {
    const std::string text = std::to_string(n);
    for (const char c : text) tokens.push_back(c - '0');
  }
};

}  // namespace shardgraph::examples
