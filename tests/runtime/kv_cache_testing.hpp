#pragma once
// What the generation tests of tests/runtime share (kv_cache_test.cpp, kv_cache_runner_test.cpp):
// the golden models' graphs and widths, the cache's sizes and block tables, a step's inputs, the
// last position's logits, and the layouts they run on.
#include <cstdint>
#include <vector>

#include <shardgraph/models/gpt2.hpp>
#include <shardgraph/models/llama.hpp>
#include <shardgraph/runtime/kv_cache.hpp>

#include "support/cpu_threads_rank_program.hpp"

namespace kv_cache_testing {

namespace sg = shardgraph;

using Mesh = sg::mesh<"dp", "tp", "pp">;

constexpr sg::graph gpt2_model() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::graph llama_model() { return sg::models::llama<Mesh>({.type = sg::dtype::f64}); }

// The golden models' widths (tests/golden/*/config.json), the vocabulary padded to 64 rows so that
// it divides over tp ranks, and LLaMA with two layers so that each layer keeps its own cache.
inline const sg::models::gpt2_config gpt2_golden{.vocab = 61, .positions = 32, .model = 24, .heads = 12, .layers = 2,
                                          .padded_vocab = 64};
inline const sg::models::llama_config llama_golden{.vocab = 61, .model = 96, .ffn = 24, .heads = 24, .kv_heads = 12,
                                            .layers = 2, .head_dim = 4, .padded_vocab = 64};

inline constexpr std::int64_t batch = 2, prompt = 5, steps = 4, block_tokens = 4, max_blocks = 3, pool = 8;
// Row b's cache blocks, in order; ids local to the rank's pool of `pool` blocks, out of order and
// disjoint between rows so that dp = 1 (both rows in one pool) and dp = 2 use one table.
inline constexpr std::int32_t row_blocks[batch][max_blocks] = {{5, 2, 7}, {1, 6, 0}};

inline sg::host_tensor ids_tensor(const std::vector<std::vector<std::int64_t>>& rows, std::int64_t from) {
  const auto length = static_cast<std::int64_t>(rows[0].size()) - from;
  std::vector<std::int64_t> ids;
  for (const auto& row : rows) ids.insert(ids.end(), row.begin() + from, row.end());
  return sg::host_tensor::from<std::int64_t>({batch, length}, ids);
}

inline sg::tensor_map step_inputs(const std::vector<std::vector<std::int64_t>>& rows, std::int64_t from, bool cached) {
  sg::tensor_map m;
  m.emplace("input_ids", ids_tensor(rows, from));
  const auto length = static_cast<std::int64_t>(rows[0].size());
  if (!cached)  // the forward program's loss reads targets; a generation program has no loss
    m.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, length}, std::vector<std::int64_t>(std::size_t(batch * length), 0)));
  if (cached) {
    std::vector<std::int32_t> tables;
    for (const auto& blocks : row_blocks) tables.insert(tables.end(), blocks, blocks + max_blocks);
    m.emplace("kv_context", sg::make_kv_context(sg::host_tensor::from<std::int32_t>({batch, max_blocks}, tables),
                                                sg::host_tensor::from<std::int32_t>(
                                                    {batch}, std::vector<std::int32_t>(batch, std::int32_t(length)))));
  }
  return m;
}

// logits (batch, seq, vocab) -> row b's last position's first `vocab` columns.
inline std::vector<double> last_logits(const sg::host_tensor& logits, std::int64_t b, std::int64_t vocab) {
  const std::int64_t seq = logits.shape()[1], columns = logits.shape()[2];
  std::vector<double> row;
  for (std::int64_t j = 0; j < vocab; ++j) row.push_back(logits.at((b * seq + seq - 1) * columns + j));
  return row;
}

// Where a generation runs: dp x tp x pp thread ranks; on a pipeline, the layers per stage
// (empty: balanced) and the micro-batches each forward's rows are split into.
struct generation_layout {
  int dp = 1, tp = 1, pp = 1;
  std::vector<std::int64_t> stage_layers{};
  std::int64_t micro_batches = 1;  // each binding is bound for batch / micro_batches rows
  sg::mesh_shape mesh() const { return {{"dp", dp}, {"tp", tp}, {"pp", pp}}; }
  int ranks() const { return dp * tp * pp; }
};

// The full forward's last-position logits of `tokens` (one sequence, run as both rows).
template <class Config>
std::vector<double> forward_last(const sg::program& forward, const Config& config, const std::vector<std::int64_t>& tokens,
                                 sg::threads::communicator& comm) {
  const auto length = static_cast<std::int64_t>(tokens.size());
  auto rank = sg::bind(forward, config.sizes(batch, length), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", 1}, {"tp", 1}},
                       sg::random_weights(7, 0.2));
  return last_logits(rank.forward(step_inputs({tokens, tokens}, 0, false)).at("logits"), 0, config.vocab);
}

}  // namespace kv_cache_testing
