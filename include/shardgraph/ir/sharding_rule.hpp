#pragma once
// sharding_rule: a user op's placements, written as an einsum-like rule (as JAX's
// custom_partitioning and Shardy do) and parsed at compile time.
//
//   "b s d, d -> b s d"          two inputs (b, s, d) and (d); the output (b, s, d)
//   "b s k, k n -> b s n | sum k"  k is absent from the output: the op sums over it
//
// One letter names one dimension (spaces between letters are optional); every dimension is named.
// Per mesh axis (passes/custom_sharding.hpp): a dimension sharded on an input passes to the output
// when its letter is in the output; a letter the op sums over may be sharded, giving a Partial
// output; any other sharded dimension, and every Partial input, is made Replicate first.
//
//   constexpr sharding_rule r = parse_sharding_rule("b s d, d -> b s d");
//   r.input_count;          // 2
//   r.dim_of(1, 'd');       // 0: input 1's dimension named d
//   r.output_dim('s');      // 1
#include <string_view>

#include "shardgraph/core/shape.hpp"
#include "shardgraph/ir/node.hpp"

namespace shardgraph {

struct sharding_rule {
  struct dims {
    char letters[max_rank]{};
    int rank = 0;
    constexpr int find(char letter) const {
      for (int d = 0; d < rank; ++d)
        if (letters[d] == letter) return d;
      return -1;
    }
  };
  dims inputs[max_inputs]{};
  int input_count = 0;
  dims output{};
  dims summed{};                    // "| sum k": letters the op sums over
  const char* error = nullptr;      // "why. how" when the text is malformed

  constexpr int dim_of(int input, char letter) const { return inputs[input].find(letter); }
  constexpr int output_dim(char letter) const { return output.find(letter); }
  constexpr bool sums_over(char letter) const { return summed.find(letter) >= 0; }
};

namespace detail {

constexpr bool is_rule_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Reads the letters of one tensor up to a character in `stops` (or the end); returns false and sets
// r.error where the text has something else, too many letters, or one letter twice.
constexpr bool read_dims(std::string_view text, std::size_t& at, std::string_view stops, sharding_rule::dims& out,
                         sharding_rule& r) {
  for (; at < text.size() && stops.find(text[at]) == std::string_view::npos; ++at) {
    const char c = text[at];
    if (c == ' ') continue;
    if (!is_rule_letter(c)) {
      r.error = "the rule has a character that is not a letter, ',', '->' or '| sum'. name each dimension "
                "with one letter, e.g. \"b s d, d -> b s d\"";
      return false;
    }
    if (out.find(c) >= 0) {
      r.error = "a letter names two dimensions of one tensor. give each dimension of a tensor its own letter";
      return false;
    }
    if (out.rank == static_cast<int>(max_rank)) {
      r.error = "a tensor has more dimensions than a shape holds (max_rank). name at most max_rank dimensions per tensor";
      return false;
    }
    out.letters[out.rank++] = c;
  }
  return true;
}

constexpr bool check_summed(sharding_rule& r) {
  for (int k = 0; k < r.summed.rank; ++k) {
    const char c = r.summed.letters[k];
    if (r.output.find(c) >= 0) {
      r.error = "a letter the op sums over is also in the output. sum only over letters absent from the output";
      return false;
    }
    bool read = false;
    for (int i = 0; i < r.input_count; ++i) read = read || r.inputs[i].find(c) >= 0;
    if (!read) {
      r.error = "the op sums over a letter no input has. name the summed dimension in an input";
      return false;
    }
  }
  return true;
}

}  // namespace detail

constexpr sharding_rule parse_sharding_rule(std::string_view text) {
  sharding_rule r;
  const std::size_t arrow = text.find("->");
  if (arrow == std::string_view::npos) {
    r.error = "the rule has no '->'. write the inputs' letters, '->', then the output's: \"b s d -> b s d\"";
    return r;
  }
  std::size_t at = 0;
  while (true) {
    static_assert(max_inputs == 5, "the message below names max_inputs");
    if (r.input_count == max_inputs) {
      r.error = "the rule names more than 5 inputs. a custom op takes at most 5 inputs (max_inputs)";
      return r;
    }
    if (!detail::read_dims(text.substr(0, arrow), at, ",", r.inputs[r.input_count++], r)) return r;
    if (at >= arrow) break;
    ++at;  // ','
  }
  at = arrow + 2;
  if (!detail::read_dims(text, at, "|", r.output, r)) return r;
  if (at < text.size()) {
    std::string_view rest = text.substr(at + 1);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (!rest.starts_with("sum ")) {
      r.error = "after '|' the rule expects 'sum' and the letters summed over. write e.g. \"b k, k -> b | sum k\"";
      return r;
    }
    std::size_t from = 4;
    if (!detail::read_dims(rest, from, "", r.summed, r)) return r;
  }
  detail::check_summed(r);
  return r;
}

}  // namespace shardgraph
