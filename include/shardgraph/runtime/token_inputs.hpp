#pragma once
// The program's inputs that hold token ids, checked on the host before any compute: the ids an
// embedding looks up and the targets a cross_entropy compares against. Every rank receives the
// whole global input (rank_program::forward), so every rank finds the same bad id and throws the
// same error, and counts the same targets, the divisor of a mean loss, without communicating.
//
//   ids      must lie in [0, classes): the table's rows, or model_sizes::classes of a padded vocabulary
//   targets  the same, or the cross_entropy's ignore_index (torch's -100: the position does not count)
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph {

// One reader of an input of token ids: an embedding (ids) or a cross_entropy (targets).
struct token_input {
  int input = -1;              // the program's input node
  int reader = -1;             // the embedding or cross_entropy reading it
  std::int64_t classes = 0;    // valid ids are [0, classes)
  bool targets = false;        // a cross_entropy's targets: ignore_index is allowed, and counted out
  std::int64_t ignore_index = -100;
};

namespace detail {
// The input a value is a (possibly sliced or redistributed) copy of, or -1.
inline int source_input(const graph_view& g, int i) {
  while (i >= 0 && g[i].kind != op::input) i = g[i].input_count == 1 ? g[i].inputs[0] : -1;
  return i;
}
}  // namespace detail

// Every embedding's ids and every cross_entropy's targets that come from an input of the program,
// with the classes each may hold. Throws at bind for a classes count outside [1, vocab].
inline std::vector<token_input> plan_token_inputs(const graph_view& g, const local_layout& layout,
                                                  const model_sizes& sizes) {
  std::vector<token_input> found;
  for (int i = 0; i < g.size(); ++i) {
    const node& n = g[i];
    if (n.kind != op::embedding && n.kind != op::cross_entropy) continue;
    const bool targets = n.kind == op::cross_entropy;
    // the table's rows (vocab, model), or the logits' last dimension (batch, seq, vocab)
    const node& classified = g[n.inputs[targets ? 0 : 1]];
    const int dim = targets ? classified.shape.rank() - 1 : 0;
    const std::int64_t rows = layout.of(n.inputs[targets ? 0 : 1]).global[static_cast<std::size_t>(dim)];
    const int input = detail::source_input(g, n.inputs[targets ? 1 : 0]);
    const std::int64_t classes = sizes.classes_of(classified.shape[dim], rows);
    if (input < 0) continue;
    found.push_back({input, i, classes, targets, n.ignore_index});
  }
  return found;
}

namespace detail {
// "batch row 1, position 3" of a (batch, seq) tensor; "element 7" of any other shape.
inline std::string token_position(const std::vector<std::int64_t>& shape, std::int64_t k) {
  if (shape.size() == 2 && shape[1] > 0)
    return "batch row " + std::to_string(k / shape[1]) + ", position " + std::to_string(k % shape[1]);
  return "element " + std::to_string(k);
}
}  // namespace detail

// Checks every token input of `inputs` and returns, per cross_entropy in `readers` order (the
// targets entries of `tokens`), how many of its targets count. An input missing or of another
// dtype is left to the upload's own check. Throws, naming the input, the batch row, the position,
// the value and the vocabulary, at the first id outside it.
inline std::vector<std::int64_t> check_token_inputs(const graph_view& g, const std::vector<token_input>& tokens,
                                                    const std::map<std::string, host_tensor>& inputs) {
  std::vector<std::int64_t> counted;
  for (const token_input& t : tokens) {
    std::int64_t count = 0;
    const std::string name(g[t.input].name.view());
    const auto it = inputs.find(name);
    const host_tensor* given = it == inputs.end() ? nullptr : &it->second;
    if (given != nullptr && (given->type() == dtype::i64 || given->type() == dtype::i32)) {
      const bool wide = given->type() == dtype::i64;
      for (std::int64_t k = 0; k < given->numel(); ++k) {
        const auto at = static_cast<std::size_t>(k);
        const std::int64_t id = wide ? given->values<std::int64_t>()[at] : given->values<std::int32_t>()[at];
        if (t.targets && id == t.ignore_index) continue;
        if (id < 0 || id >= t.classes) {
          const std::string allowed = t.targets ? " (or the ignore index " + std::to_string(t.ignore_index) + ")" : "";
          fail("forward: input '" + name + "'",
               std::string(t.targets ? "target " : "id ") + std::to_string(id) + " at " +
                   detail::token_position(given->shape(), k) + " is outside the vocabulary [0, " +
                   std::to_string(t.classes) + ")" + allowed,
               t.targets ? "check the tokenizer's vocabulary against the model's, or mark the position with the "
                           "ignore index"
                         : "check the tokenizer's vocabulary against the model's vocab");
        }
        ++count;
      }
    }
    if (t.targets) counted.push_back(count);
  }
  return counted;
}

}  // namespace shardgraph
