#pragma once
// run_generation: drives a scheduler to the end on the bound generation program of one rank
// (compile<model, inference{.kv_cache = true}>()), and returns every request's result.
//
//   generate::scheduler s(kv_size, {.vocab_size = 61, .max_batched_tokens = 8});
//   s.submit({.prompt = {4, 9, 33}, .max_new_tokens = 6});
//   auto bind_rank = [&](std::int64_t batch, std::int64_t seq, const auto& parameters) {
//     model_sizes sizes = config.sizes(batch, seq);   // one binding per (batch, seq)
//     return bind(generation, set_kv_cache_sizes(sizes, cache), comm, cpu::backend{}, mesh, parameters);
//   };
//   auto results = generate::run_generation(s, bind_rank, weights, {.max_blocks = 8});
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
// together. Bindings are made on first use and kept (up to runner_options::max_bindings). They
// share one copy of the parameters (runtime/shared_parameters.hpp): make_rank passes `parameters`
// to bind where the weights go, and the runner gives the first binding `weights` (read then, and
// only then) and every later one the first's share_parameters(). So the weights are read once,
// and all bindings write and read one KV cache, whichever binding a step runs on. No padding:
// every row's tokens are real, so no row writes a slot it does not own.
//
// Blocks freed by finished or preempted sequences are handed out again without clearing: a step
// writes the keys and values of its tokens before its attention reads them, and a row reads only
// positions [0, its context length), which its own earlier steps (or this one) wrote.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/core/weight_source.hpp"
#include "shardgraph/generate/sampler.hpp"
#include "shardgraph/generate/scheduler.hpp"
#include "shardgraph/runtime/kv_cache.hpp"
#include "shardgraph/runtime/shared_parameters.hpp"

namespace shardgraph::generate {

struct runner_options {
  std::int64_t max_blocks = 0;  // kv_context's block columns: kv_cache_shape::max_blocks of the bindings
  // Bindings kept at once, each with its own activations (the parameters and cache are shared).
  // Past it, the least recently used one is dropped, and bound again when a step needs it.
  std::int64_t max_bindings = 8;
  // Called with each step before it runs (to print it with step_text.hpp, or to count its kinds).
  std::function<void(const scheduled_step&)> on_step{};
  // Called with each sampled token as soon as its step has run, in the step's order (streaming).
  // A request's tokens come in order and once each: a recompute after preemption samples nothing
  // that was sampled before.
  std::function<void(request_id, token_id)> on_token{};
  // Set for a run that takes requests while it runs (engine.hpp): called at each step boundary
  // (before the first step, and after each), where it may submit and cancel requests and must take
  // the finished ones (scheduler::take_finished; run_generation then returns none). It blocks
  // while the scheduler has no work, and returns false to end the run. Unset: the run ends when
  // the scheduler has no work.
  std::function<bool(scheduler&)> at_step_boundary{};
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

// Converts to the rank that make() returns, so that a map node holds it without moving it.
template <class Make>
struct rank_maker {
  Make make;
  operator std::invoke_result_t<const Make&>() const { return make(); }
};
template <class Make>
rank_maker(Make) -> rank_maker<Make>;

// The bindings of one run, per (batch, seq), up to `most` at once (the least recently used is
// dropped), all with the parameters of the first: `weights` are read by it only.
template <class Rank, class MakeRank>
class bindings {
 public:
  using shape = std::pair<std::int64_t, std::int64_t>;  // (batch, seq)

  bindings(MakeRank& make, const weight_source& weights, std::int64_t most)
      : make_(make), weights_(weights), most_(most) {}

  Rank& at(shape key) {
    if (!ranks_.contains(key) && static_cast<std::int64_t>(ranks_.size()) >= most_) {
      const auto oldest = std::min_element(last_used_.begin(), last_used_.end(),
                                           [](const auto& a, const auto& b) { return a.second < b.second; });
      ranks_.erase(oldest->first);
      last_used_.erase(oldest);
    }
    last_used_[key] = calls_++;
    if (ranks_.contains(key)) return ranks_.at(key);
    if (!shared_) {
      Rank& first = bind(key, weights_);
      shared_.emplace(first.share_parameters());
      return first;
    }
    Rank& r = bind(key, *shared_);
    if (r.share_parameters().memory() != shared_->memory())
      fail("run_generation",
           "the binding for batch " + std::to_string(key.first) + ", seq " + std::to_string(key.second) +
               " holds its own parameters",
           "pass make_rank's `parameters` to bind in place of the weights");
    return r;
  }

 private:
  template <class Parameters>
  Rank& bind(shape key, const Parameters& from) {
    return ranks_.try_emplace(key, rank_maker{[&] { return make_(key.first, key.second, from); }})
        .first->second;
  }

  MakeRank& make_;
  const weight_source& weights_;
  std::int64_t most_;
  std::map<shape, Rank> ranks_;
  std::map<shape, std::int64_t> last_used_;  // the call that last ran each binding
  std::int64_t calls_ = 0;
  std::optional<shared_parameters<typename Rank::backend_type>> shared_;  // the first binding's
};

}  // namespace detail

// Runs `s` until it has no work. make_rank(batch, seq, parameters) binds the generation program for
// that many rows of that many tokens, with the cache sizes of `s` (set_kv_cache_sizes), giving bind
// `parameters` in place of the weights: `weights` for the first binding, then the first binding's
// shared parameters (so make_rank takes `const auto&`). Returns every request's result, those that
// failed at submit included, in order of request id (none with options.at_step_boundary).
template <class MakeRank>
std::vector<generation_result> run_generation(scheduler& s, MakeRank make_rank, const weight_source& weights,
                                              const runner_options& options) {
  static_assert(
      std::is_invocable_v<MakeRank&, std::int64_t, std::int64_t, const weight_source&>,
      "shardgraph: run_generation: make_rank must take (batch, seq, parameters) and pass parameters to "
      "bind in place of the weights. Add `const auto& parameters` and give the weights to run_generation");
  using rank = std::invoke_result_t<MakeRank&, std::int64_t, std::int64_t, const weight_source&>;
  using shared = shared_parameters<typename rank::backend_type>;
  static_assert(
      std::is_same_v<std::invoke_result_t<MakeRank&, std::int64_t, std::int64_t, const shared&>, rank>,
      "shardgraph: run_generation: make_rank must return the same rank type for the weights and for "
      "shared parameters. Take `const auto& parameters` and pass it to bind");
  if (options.max_blocks < 1)
    fail("run_generation", "max_blocks is " + std::to_string(options.max_blocks),
         "give the bindings' kv_cache_shape::max_blocks");
  if (options.max_bindings < 1)
    fail("run_generation", "max_bindings is " + std::to_string(options.max_bindings),
         "keep at least 1 binding");
  detail::bindings<rank, MakeRank> ranks(make_rank, weights, options.max_bindings);
  const bool serving = static_cast<bool>(options.at_step_boundary);
  std::vector<generation_result> results = serving ? std::vector<generation_result>{} : s.take_finished();
  while (serving ? options.at_step_boundary(s) : s.has_work()) {
    if (!s.has_work()) continue;
    const scheduled_step step = s.schedule();
    if (options.on_step) options.on_step(step);
    std::map<std::int64_t, std::vector<const scheduled_sequence*>> groups;  // tokens fed -> sequences
    for (const scheduled_sequence& q : step.sequences)
      groups[static_cast<std::int64_t>(q.tokens.size())].push_back(&q);
    std::map<request_id, token_id> sampled;
    for (const auto& [seq, group] : groups) {
      const auto batch = static_cast<std::int64_t>(group.size());
      rank& r = ranks.at({batch, seq});
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
    if (!serving)
      for (generation_result& r : s.take_finished()) results.push_back(std::move(r));
  }
  std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return results;
}

}  // namespace shardgraph::generate
