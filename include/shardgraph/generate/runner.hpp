#pragma once
// run_generation: drives a scheduler to the end on the bound generation program of one rank
// (compile<model, inference{.kv_cache = true}>()), and returns every request's result.
//
//   generate::scheduler s(kv_size, {.vocab_size = 61, .max_batched_tokens = 8});
//   s.submit({.prompt = {4, 9, 33}, .max_new_tokens = 6});
//   auto bind_rank = [&](std::int64_t batch, std::int64_t seq) {   // one binding per (batch, seq)
//     model_sizes sizes = config.sizes(batch, seq);
//     return bind(generation, set_kv_cache_sizes(sizes, cache), comm, cpu::backend{}, mesh, weights);
//   };
//   auto results = generate::run_generation(s, bind_rank, {.max_blocks = 8});
//
// Every rank of the mesh runs this with its own scheduler, fed the same requests: the scheduler is
// deterministic, so all ranks run the same steps and their collectives meet. On pipeline stages,
// make_rank(batch, seq) binds for batch / pipeline_micro_batches(batch, stages) rows: the runner's
// call gives all `batch` rows, and they flow through the stages as micro-batches
// (runtime/micro_batch_rows.hpp).
//
// A rank binds one (batch, seq). Each step's sequences are grouped by the number of tokens they
// feed: each group runs as one call of the binding (batch = the group's sequences, seq = their
// tokens), so the decodes of a step run as one seq = 1 batch and prefill chunks of one length run
// together. Bindings are made on first use and kept (up to runner_options::max_bindings); each holds
// a whole cache, and when a step runs
// on another binding than the last, copy_kv_cache moves the cache to it. No padding: every row's
// tokens are real, so no row writes a slot it does not own.
//
// Blocks freed by finished or preempted sequences are handed out again without clearing: a step
// writes the keys and values of its tokens before its attention reads them, and a row reads only
// positions [0, its context length), which its own earlier steps (or this one) wrote.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/generate/sampler.hpp"
#include "shardgraph/generate/scheduler.hpp"
#include "shardgraph/runtime/kv_cache.hpp"

namespace shardgraph::generate {

struct runner_options {
  std::int64_t max_blocks = 0;  // kv_context's block columns: kv_cache_shape::max_blocks of the bindings
  // Bindings kept at once, each with a whole cache (at least 2: the cache's holder and the next).
  // Past it, the least recently used one other than the holder is dropped, and bound again when
  // a step needs it.
  std::int64_t max_bindings = 8;
  // Called with each step before it runs (to print it with step_text.hpp, or to count its kinds).
  std::function<void(const scheduled_step&)> on_step{};
  // Called with each sampled token as soon as its step has run, in the step's order (streaming).
  // A request's tokens come in order and once each: a recompute after preemption samples nothing
  // that was sampled before.
  std::function<void(request_id, token_id)> on_token{};
};

namespace detail {

// The inputs of one group: input_ids (rows, seq) i64 and kv_context (rows, 1 + max_blocks) i32,
// row b = [tokens cached after the step, its block table, zeros up to max_blocks].
inline std::map<std::string, host_tensor> group_inputs(const std::vector<const scheduled_sequence*>& group,
                                                       std::int64_t max_blocks) {
  const auto rows = static_cast<std::int64_t>(group.size());
  const auto seq = static_cast<std::int64_t>(group[0]->tokens.size());
  std::vector<std::int64_t> ids;
  std::vector<std::int32_t> tables, lengths;
  for (const scheduled_sequence* s : group) {
    if (static_cast<std::int64_t>(s->block_table.size()) > max_blocks)
      fail("run_generation",
           "request " + std::to_string(s->id) + " holds " + std::to_string(s->block_table.size()) +
               " blocks, more than the bindings' max_blocks " + std::to_string(max_blocks),
           "bind with max_blocks = the blocks of the model's positions (kv_cache_shape::blocks_for)");
    ids.insert(ids.end(), s->tokens.begin(), s->tokens.end());
    tables.insert(tables.end(), s->block_table.begin(), s->block_table.end());
    tables.resize(tables.size() + static_cast<std::size_t>(max_blocks) - s->block_table.size(), 0);
    lengths.push_back(static_cast<std::int32_t>(s->first_position + seq));
  }
  std::map<std::string, host_tensor> inputs;
  inputs.emplace("input_ids", host_tensor::from<std::int64_t>({rows, seq}, ids));
  inputs.emplace("kv_context", make_kv_context(host_tensor::from<std::int32_t>({rows, max_blocks}, tables),
                                               host_tensor::from<std::int32_t>({rows}, lengths)));
  return inputs;
}

// Row b's last position's logits (batch, seq, columns) -> its first `vocab` columns.
inline std::vector<double> last_position_logits(const host_tensor& logits, std::int64_t b,
                                                std::int64_t vocab) {
  const std::int64_t seq = logits.shape()[1], columns = logits.shape()[2];
  if (columns < vocab)
    fail("run_generation",
         "the logits have " + std::to_string(columns) + " columns for a vocabulary of " +
             std::to_string(vocab),
         "give the scheduler the model's vocab (not its padded rows)");
  std::vector<double> row(static_cast<std::size_t>(vocab));
  for (std::int64_t j = 0; j < vocab; ++j)
    row[static_cast<std::size_t>(j)] = logits.at((b * seq + seq - 1) * columns + j);
  return row;
}

// Converts to the rank that make_rank returns, so that a map node holds it without moving it.
template <class MakeRank>
struct rank_maker {
  MakeRank& make;
  std::int64_t batch, seq;
  operator std::invoke_result_t<MakeRank&, std::int64_t, std::int64_t>() const { return make(batch, seq); }
};

}  // namespace detail

// Runs `s` until it has no work. make_rank(batch, seq) binds the generation program for that many
// rows of that many tokens, with the cache sizes of `s` (set_kv_cache_sizes). Returns every
// request's result, those that failed at submit included, in order of request id.
template <class MakeRank>
std::vector<generation_result> run_generation(scheduler& s, MakeRank make_rank,
                                              const runner_options& options) {
  using rank = std::invoke_result_t<MakeRank&, std::int64_t, std::int64_t>;
  if (options.max_blocks < 1)
    fail("run_generation", "max_blocks is " + std::to_string(options.max_blocks),
         "give the bindings' kv_cache_shape::max_blocks");
  if (options.max_bindings < 2)
    fail("run_generation", "max_bindings is " + std::to_string(options.max_bindings),
         "keep at least 2 bindings: the one holding the cache and the one it moves to");
  using shape = std::pair<std::int64_t, std::int64_t>;  // (batch, seq)
  std::map<shape, rank> ranks;
  std::map<shape, std::int64_t> last_used;  // the call that last ran each binding
  std::int64_t calls = 0;
  rank* cache_holder = nullptr;  // the binding whose cache is current
  const auto binding = [&](shape key) -> rank& {
    if (!ranks.contains(key) && static_cast<std::int64_t>(ranks.size()) >= options.max_bindings) {
      auto oldest = last_used.end();  // least recently used, never the holder
      for (auto it = last_used.begin(); it != last_used.end(); ++it)
        if (&ranks.at(it->first) != cache_holder &&
            (oldest == last_used.end() || it->second < oldest->second))
          oldest = it;
      ranks.erase(oldest->first);
      last_used.erase(oldest);
    }
    last_used[key] = calls++;
    return ranks.try_emplace(key, detail::rank_maker<MakeRank>{make_rank, key.first, key.second})
        .first->second;
  };
  std::vector<generation_result> results = s.take_finished();
  while (s.has_work()) {
    const scheduled_step step = s.schedule();
    if (options.on_step) options.on_step(step);
    std::map<std::int64_t, std::vector<const scheduled_sequence*>> groups;  // tokens fed -> sequences
    for (const scheduled_sequence& q : step.sequences)
      groups[static_cast<std::int64_t>(q.tokens.size())].push_back(&q);
    std::map<request_id, token_id> sampled;
    for (const auto& [seq, group] : groups) {
      const auto batch = static_cast<std::int64_t>(group.size());
      rank& r = binding({batch, seq});
      if (cache_holder != nullptr && cache_holder != &r) copy_kv_cache(*cache_holder, r);
      cache_holder = &r;
      const host_tensor logits = r.forward(detail::group_inputs(group, options.max_blocks)).at("logits");
      for (std::int64_t b = 0; b < batch; ++b) {
        const scheduled_sequence& q = *group[static_cast<std::size_t>(b)];
        if (!q.samples) continue;
        const std::vector<double> row = detail::last_position_logits(logits, b, s.vocab_size());
        sampled[q.id] = sample_next_token(std::span<const double>(row), q.sampling, q.history, q.generated);
      }
    }
    std::vector<token_id> next;  // in the step's order, as complete() takes them
    for (const scheduled_sequence& q : step.sequences) {
      if (!q.samples) continue;
      next.push_back(sampled.at(q.id));
      if (options.on_token) options.on_token(q.id, next.back());
    }
    s.complete(next);
    for (generation_result& r : s.take_finished()) results.push_back(std::move(r));
  }
  std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return results;
}

}  // namespace shardgraph::generate
