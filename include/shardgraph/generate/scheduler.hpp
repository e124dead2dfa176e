#pragma once
// scheduler: continuous batching over one paged KV cache. Requests join and leave at any step;
// each step is a list of sequences, with the tokens each feeds, their positions and block tables,
// that a runner turns into one batched call of the prefill/decode program.
//
//   scheduler s(kv_size, {.vocab_size = 50257, .max_batched_tokens = 512});
//   s.submit({.prompt = ids, .max_new_tokens = 32});
//   while (s.has_work()) {
//     const scheduled_step step = s.schedule();
//     std::vector<token_id> next;                           // one per sequence with samples = true
//     ... run the model on step.sequences, sample each sampling sequence's next token ...
//     s.complete(next);
//     for (auto& done : s.take_finished()) ...              // finished (or failed) requests
//   }
//
// A step is built in this order, within max_batched_tokens tokens and max_sequences sequences:
//   1. decodes: every running sequence with one token to feed, oldest admission first. When its
//      next token needs a block and none is free, the most recently admitted running sequence is
//      preempted: its blocks go back to the pool and it returns to the FRONT of the waiting queue,
//      to be recomputed later from its prompt and generated tokens (the sequence itself, when it is
//      the most recent);
//   2. prefill chunks of running sequences whose prompt (or recompute) is not all in the cache,
//      oldest first, as many tokens as the budget and the free blocks allow (chunked prefill, so
//      that a long prompt never stops the decodes);
//   3. admission, first come first served: the head of the waiting queue (preempted sequences
//      first, then new requests in order of submission) joins with its first chunk while the
//      budget, max_sequences and free blocks allow; a head that does not fit stops admission
//      (no request overtakes an earlier one).
// When no running sequence can take a block (long prefills holding the pool between them), the most
// recently admitted is preempted until one can: every step runs something while work is left.
// A request that could never fit (check_request, or more blocks than the pool holds) fails alone
// at submit: its result carries the error, the others go on.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/generate/block_tables.hpp"
#include "shardgraph/generate/request.hpp"

namespace shardgraph::generate {

struct scheduler_options {
  std::int64_t vocab_size = 0;
  std::int64_t max_batched_tokens = 512;  // tokens per step: decodes and prefill chunks together
  std::int64_t max_sequences = 256;       // running at once; at most max_batched_tokens
};

// One sequence's part of a step. The spans stay valid until complete().
struct scheduled_sequence {
  request_id id = 0;
  // The ids to feed, at positions first_position, first_position + 1, ...
  std::span<const token_id> tokens{};
  std::int64_t first_position = 0;
  // The physical block of each logical block of positions [0, first_position + tokens.size()).
  std::vector<block_id> block_table{};
  bool prefill = false;  // a prompt's or a recompute's chunk; false: one token after a cached prefix
  bool samples = false;  // the chunk ends the sequence: sample from its last position's logits
  // What the sampler needs (sampler.hpp: sample_next_token(logits, sampling, history, generated)).
  std::span<const token_id> history{};  // prompt and generated tokens so far
  std::int64_t generated = 0;           // tokens generated so far: the draw index of the next
  sampling_params sampling{};
};

struct scheduled_step {
  std::vector<scheduled_sequence> sequences{};  // decodes, then prefill chunks, then admitted ones
  std::vector<request_id> preempted{};          // sent back to the waiting queue while building it
  std::int64_t tokens = 0;                      // fed in all

  std::int64_t sampling_count() const {
    return std::count_if(sequences.begin(), sequences.end(), [](const auto& s) { return s.samples; });
  }
};

class scheduler {
 public:
  scheduler(const kv_cache_size& cache, scheduler_options options) : cache_(cache), options_(options) {
    const auto n = [](std::int64_t v) { return std::to_string(v); };
    if (options.vocab_size < 1)
      fail("scheduler", "vocab_size is " + n(options.vocab_size), "give the model's vocabulary size");
    if (options.max_sequences < 1 || options.max_sequences > options.max_batched_tokens)
      fail("scheduler",
           "max_sequences is " + n(options.max_sequences) + " with max_batched_tokens " +
               n(options.max_batched_tokens),
           "give 1 <= max_sequences <= max_batched_tokens, so that every running sequence decodes each step");
    running_.reserve(static_cast<std::size_t>(options.max_sequences));
  }

  // Queues a request and returns its id. Never throws for the request's content: a bad request
  // finishes at once as failed, with its error (take_finished()).
  request_id submit(generation_request request) {
    const request_id id = next_id_++;
    try {
      check_request(request, id, {options_.vocab_size, cache_.size().shape.max_positions});
      check_fits(request, id);
    } catch (const error& e) {
      finished_.push_back({.id = id, .generated = {}, .reason = finish_reason::failed, .error = e.what()});
      return id;
    }
    sequence s{.id = id, .request = std::move(request)};
    s.tokens = s.request.prompt;
    waiting_.push_back(std::move(s));
    return id;
  }

  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  std::int64_t waiting_count() const { return static_cast<std::int64_t>(waiting_.size()); }
  std::int64_t running_count() const { return static_cast<std::int64_t>(running_.size()); }
  std::int64_t preemption_count() const { return preemptions_; }
  const block_tables& cache() const { return cache_; }
  std::int64_t vocab_size() const { return options_.vocab_size; }

  // The next step (empty only when there is no work). Call complete() before the next schedule().
  scheduled_step schedule() {
    if (!in_flight_.empty())
      fail("scheduler::schedule", "the previous step is not complete",
           "call complete() with its sampled tokens first");
    scheduled_step step;
    for (;;) {
      std::int64_t budget = options_.max_batched_tokens;
      schedule_decodes(step, budget);
      schedule_prefills(step, budget);
      admit_waiting(step, budget);
      if (!step.sequences.empty() || running_.empty()) break;
      preempt(running_.size() - 1, step);  // each running sequence waits for blocks the others hold
    }
    if (step.sequences.empty() && !waiting_.empty())
      fail("scheduler::schedule", "the head of the waiting queue fits in no step",
           "this is a bug in the scheduler: please report it with the options and requests");
    for (const auto& s : step.sequences)
      in_flight_.push_back({s.id, static_cast<std::int64_t>(s.tokens.size()), s.samples});
    return step;
  }

  // Ends the step: one sampled token per sequence with samples = true, in the step's order.
  void complete(std::span<const token_id> sampled) {
    const auto expected =
        std::count_if(in_flight_.begin(), in_flight_.end(), [](const auto& p) { return p.samples; });
    if (static_cast<std::int64_t>(sampled.size()) != expected)
      fail("scheduler::complete",
           std::to_string(sampled.size()) + " sampled tokens for a step with " + std::to_string(expected) +
               " sampling sequences",
           "pass one token per scheduled sequence with samples = true, in the step's order");
    check_token_ids(sampled, options_.vocab_size, "scheduler::complete", "sampled");
    std::size_t next = 0;
    std::vector<request_id> done;
    for (const pending& p : in_flight_) {
      sequence& s = running_at(p.id);
      s.computed += p.count;
      if (!p.samples) continue;
      s.tokens.push_back(sampled[next++]);
      if (const auto reason = finished(s)) {
        finished_.push_back({.id = s.id,
                             .generated = s.generated_tokens(),
                             .reason = *reason,
                             .error = {},
                             .preemptions = s.preemptions});
        done.push_back(s.id);
      }
    }
    in_flight_.clear();
    for (const request_id id : done) {
      cache_.release(id);
      std::erase_if(running_, [&](const sequence& s) { return s.id == id; });
    }
  }

  // Ends a waiting or running request now (a client that went away): its blocks go back to the pool
  // and its result, with the tokens generated so far, comes with finish_reason::cancelled. False
  // for a request that has finished or was never submitted. Not while its step runs.
  bool cancel(request_id id) {
    if (std::any_of(in_flight_.begin(), in_flight_.end(), [&](const pending& p) { return p.id == id; }))
      fail("scheduler::cancel", "request " + std::to_string(id) + " is in the step being run",
           "cancel it after complete()");
    const auto is_it = [&](const sequence& s) { return s.id == id; };
    sequence* s = nullptr;
    if (const auto it = std::find_if(running_.begin(), running_.end(), is_it); it != running_.end()) s = &*it;
    if (const auto it = std::find_if(waiting_.begin(), waiting_.end(), is_it); it != waiting_.end()) s = &*it;
    if (s == nullptr) return false;
    finished_.push_back({.id = id,
                         .generated = s->generated_tokens(),
                         .reason = finish_reason::cancelled,
                         .error = {},
                         .preemptions = s->preemptions});
    cache_.release(id);
    std::erase_if(running_, is_it);
    std::erase_if(waiting_, is_it);
    return true;
  }

  // The requests finished (or failed) since the last call, in the order they finished.
  std::vector<generation_result> take_finished() { return std::exchange(finished_, {}); }

 private:
  struct sequence {
    request_id id = 0;
    generation_request request{};
    std::vector<token_id> tokens{};  // prompt, then generated
    std::int64_t computed = 0;       // tokens whose keys and values the cache holds
    std::int64_t preemptions = 0;

    std::int64_t remaining() const { return static_cast<std::int64_t>(tokens.size()) - computed; }
    std::int64_t generated() const {
      return static_cast<std::int64_t>(tokens.size() - request.prompt.size());
    }
    std::vector<token_id> generated_tokens() const {
      return {tokens.begin() + static_cast<std::ptrdiff_t>(request.prompt.size()), tokens.end()};
    }
  };
  struct pending {
    request_id id;
    std::int64_t count;
    bool samples;
  };

  // The cache holds every fed token; the last generated one is never fed.
  void check_fits(const generation_request& r, request_id id) const {
    const auto& shape = cache_.size().shape;
    const std::int64_t longest = std::min<std::int64_t>(
        static_cast<std::int64_t>(r.prompt.size()) + r.max_new_tokens, shape.max_positions);
    const std::int64_t blocks = shape.blocks_for(longest - 1);
    if (blocks > cache_.pool().total())
      fail("kv cache",
           "request " + std::to_string(id) + " needs " + std::to_string(blocks) + " blocks of " +
               std::to_string(shape.block_tokens) + " tokens for the " + std::to_string(longest - 1) +
               " tokens it may feed the model, but the pool holds " + std::to_string(cache_.pool().total()),
           "give a larger --kv-memory, or a shorter prompt or max_new_tokens");
  }

  void schedule_decodes(scheduled_step& step, std::int64_t& budget) {
    for (std::size_t i = 0; i < running_.size(); ++i) {
      if (running_[i].remaining() != 1) continue;
      const request_id id = running_[i].id;
      bool placed = cache_.append_token(id);
      while (!placed) {
        const std::size_t victim = running_.size() - 1;
        preempt(victim, step);
        if (victim == i) break;
        placed = cache_.append_token(id);
      }
      if (!placed) break;  // the sequence was the most recent: nothing after it is left
      add(step, running_[i], 1, /*prefill=*/false, budget);
    }
  }

  void schedule_prefills(scheduled_step& step, std::int64_t& budget) {
    for (sequence& s : running_) {
      if (s.remaining() < 2 || budget == 0) continue;
      const std::int64_t count = std::min({s.remaining(), budget, cache_.room(s.id)});
      if (count == 0 || !cache_.append_tokens(s.id, count)) continue;
      add(step, s, count, /*prefill=*/true, budget);
    }
  }

  void admit_waiting(scheduled_step& step, std::int64_t& budget) {
    while (!waiting_.empty() && budget > 0 && running_count() < options_.max_sequences) {
      sequence& head = waiting_.front();
      const std::int64_t count = std::min({head.remaining(), budget, cache_.room(head.id)});
      if (count == 0) return;
      running_.push_back(std::move(head));
      waiting_.pop_front();
      sequence& s = running_.back();
      cache_.append_tokens(s.id, count);
      add(step, s, count, /*prefill=*/true, budget);
    }
  }

  void add(scheduled_step& step, const sequence& s, std::int64_t count, bool prefill, std::int64_t& budget) {
    const auto table = cache_.table(s.id);
    step.sequences.push_back({.id = s.id,
                              .tokens = std::span(s.tokens).subspan(static_cast<std::size_t>(s.computed),
                                                                    static_cast<std::size_t>(count)),
                              .first_position = s.computed,
                              .block_table = {table.begin(), table.end()},
                              .prefill = prefill,
                              .samples = count == s.remaining(),
                              .history = s.tokens,
                              .generated = s.generated(),
                              .sampling = s.request.sampling});
    step.tokens += count;
    budget -= count;
  }

  void preempt(std::size_t index, scheduled_step& step) {
    sequence& s = running_[index];
    cache_.release(s.id);
    s.computed = 0;
    ++s.preemptions;
    ++preemptions_;
    step.preempted.push_back(s.id);
    waiting_.push_front(std::move(s));
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  }

  std::optional<finish_reason> finished(const sequence& s) const {
    const auto& stops = s.request.stop_tokens;
    if (std::find(stops.begin(), stops.end(), s.tokens.back()) != stops.end())
      return finish_reason::stop_token;
    if (s.generated() >= s.request.max_new_tokens) return finish_reason::max_new_tokens;
    if (static_cast<std::int64_t>(s.tokens.size()) >= cache_.size().shape.max_positions)
      return finish_reason::max_positions;
    return std::nullopt;
  }

  sequence& running_at(request_id id) {
    const auto it =
        std::find_if(running_.begin(), running_.end(), [&](const sequence& s) { return s.id == id; });
    return *it;  // complete() follows the schedule() that put it there
  }

  block_tables cache_;
  scheduler_options options_;
  std::deque<sequence> waiting_;
  std::vector<sequence> running_;  // in order of admission
  std::vector<pending> in_flight_;
  std::vector<generation_result> finished_;
  request_id next_id_ = 0;
  std::int64_t preemptions_ = 0;
};

}  // namespace shardgraph::generate
