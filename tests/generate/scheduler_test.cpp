#include "shardgraph/generate/scheduler.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "catch.hpp"
#include "shardgraph/data/splitmix64.hpp"
#include "shardgraph/generate/sampler.hpp"
#include "shardgraph/generate/step_text.hpp"

namespace generate = shardgraph::generate;
namespace data = shardgraph::data;
using generate::token_id;
using shardgraph::testing::ContainsSubstring;

namespace {

constexpr std::int64_t vocab = 64;

generate::kv_cache_size cache_of(std::int64_t blocks, std::int64_t block_tokens, std::int64_t max_positions) {
  return {{.layers = 1,
           .local_kv_heads = 1,
           .head_dim = 1,
           .dtype_bytes = 1,
           .max_positions = max_positions,
           .block_tokens = block_tokens},
          blocks};
}

// The fake model: the logits of a sequence's last position are a fixed function of all its tokens.
std::vector<double> fake_logits(std::span<const token_id> tokens) {
  std::uint64_t h = 0x51ED;
  for (const token_id t : tokens) h = data::mix64(h ^ static_cast<std::uint64_t>(t));
  std::vector<double> logits(vocab);
  for (std::int64_t v = 0; v < vocab; ++v)
    logits[static_cast<std::size_t>(v)] =
        static_cast<double>(data::mix64(h + static_cast<std::uint64_t>(v)) % 1000) / 100;
  return logits;
}

// A runner over a fake paged cache: each fed token is written to the slot its block table gives, and
// the logits are computed from the tokens read back through the table, so a wrong table, a block
// shared by two live sequences or a lost write changes the tokens.
struct fake_runner {
  struct slot {
    generate::request_id id = -1;
    std::int64_t position = -1;
    token_id token = -1;
  };
  std::int64_t block_tokens;
  std::vector<slot> slots;

  fake_runner(std::int64_t blocks, std::int64_t block_tokens_)
      : block_tokens(block_tokens_), slots(static_cast<std::size_t>(blocks * block_tokens_)) {}

  slot& at(const generate::scheduled_sequence& s, std::int64_t position) {
    const auto block = s.block_table.at(static_cast<std::size_t>(position / block_tokens));
    return slots.at(static_cast<std::size_t>(block * block_tokens + position % block_tokens));
  }

  std::vector<token_id> run(const generate::scheduled_step& step) {
    std::vector<token_id> sampled;
    for (const auto& s : step.sequences) {
      for (std::size_t j = 0; j < s.tokens.size(); ++j) {
        const std::int64_t position = s.first_position + static_cast<std::int64_t>(j);
        at(s, position) = {s.id, position, s.tokens[j]};
      }
      if (!s.samples) continue;
      std::vector<token_id> cached;
      const std::int64_t end = s.first_position + static_cast<std::int64_t>(s.tokens.size());
      for (std::int64_t p = 0; p < end; ++p) {
        const slot& c = at(s, p);
        REQUIRE(c.id == s.id);
        REQUIRE(c.position == p);
        cached.push_back(c.token);
      }
      REQUIRE(std::equal(cached.begin(), cached.end(), s.history.begin(), s.history.end()));
      const auto logits = fake_logits(cached);
      sampled.push_back(
          generate::sample_next_token(std::span<const double>(logits), s.sampling, s.history, s.generated));
    }
    return sampled;
  }
};

std::vector<generate::generation_request> random_requests(int count, std::uint64_t seed) {
  data::splitmix64 random(seed);
  std::vector<generate::generation_request> requests;
  for (int r = 0; r < count; ++r) {
    generate::generation_request q;
    const auto prompt_tokens = 1 + static_cast<std::int64_t>(random.below(40));
    for (std::int64_t i = 0; i < prompt_tokens; ++i)
      q.prompt.push_back(static_cast<token_id>(random.below(vocab)));
    q.max_new_tokens = 1 + static_cast<std::int64_t>(random.below(30));
    if (r % 3 == 0) q.stop_tokens = {static_cast<token_id>(random.below(vocab))};
    if (r % 2 == 1)
      q.sampling = {.temperature = 0.7,
                    .top_k = r % 4 == 1 ? 20 : 0,
                    .top_p = 0.9,
                    .repetition_penalty = 1.1,
                    .seed = random.next()};
    requests.push_back(q);
  }
  return requests;
}

struct run_record {
  std::map<generate::request_id, generate::generation_result> results;
  std::vector<generate::request_id> first_scheduled;  // ids in the order of their first step
  int steps = 0, steps_with_decode_and_prefill = 0, chunked_prompts = 0;
};

// Drives `s` to the end, checking each step against the options.
run_record drive(generate::scheduler& s, std::int64_t blocks, std::int64_t block_tokens,
                 const generate::scheduler_options& options) {
  fake_runner runner(blocks, block_tokens);
  run_record record;
  std::map<generate::request_id, int> prefill_chunks;
  while (s.has_work()) {
    REQUIRE(record.steps < 100'000);  // never a hang
    const auto step = s.schedule();
    ++record.steps;
    REQUIRE(!step.sequences.empty());
    CHECK(step.tokens <= options.max_batched_tokens);
    CHECK(static_cast<std::int64_t>(step.sequences.size()) <= options.max_sequences);
    std::set<generate::block_id> blocks_in_step;
    bool decode = false, prefill = false, prefill_seen = false;
    for (const auto& q : step.sequences) {
      for (const auto b : q.block_table) CHECK(blocks_in_step.insert(b).second);  // no block in two tables
      if (!q.prefill) CHECK_FALSE(prefill_seen);                                  // decodes come first
      prefill_seen = prefill_seen || q.prefill;
      (q.prefill ? prefill : decode) = true;
      if (q.prefill && q.generated == 0) ++prefill_chunks[q.id];
      if (std::find(record.first_scheduled.begin(), record.first_scheduled.end(), q.id) ==
          record.first_scheduled.end())
        record.first_scheduled.push_back(q.id);
    }
    if (decode && prefill) ++record.steps_with_decode_and_prefill;
    s.complete(runner.run(step));
    for (auto& result : s.take_finished()) record.results[result.id] = result;
  }
  for (const auto& [id, chunks] : prefill_chunks) record.chunked_prompts += chunks > 1;
  return record;
}

}  // namespace

TEST_CASE("100 requests under a small block budget all finish, with preemption, and free every block",
          "[generate]") {
  const auto requests = random_requests(100, 2026);
  const generate::scheduler_options options{
      .vocab_size = vocab, .max_batched_tokens = 24, .max_sequences = 8};
  // 40 blocks of 4 tokens: 160 token slots for up to 8 sequences of up to 69 tokens.
  generate::scheduler small(cache_of(40, 4, 64), options);
  for (const auto& r : requests) small.submit(r);
  const run_record tight = drive(small, 40, 4, options);

  REQUIRE(tight.results.size() == 100);
  for (const auto& [id, result] : tight.results) {
    INFO("request " << id << ": " << result.error);
    CHECK(result.reason != generate::finish_reason::failed);
    const auto& r = requests[static_cast<std::size_t>(id)];
    CHECK(!result.generated.empty());
    CHECK(static_cast<std::int64_t>(result.generated.size()) <= r.max_new_tokens);
    if (result.reason == generate::finish_reason::stop_token)
      CHECK(std::find(r.stop_tokens.begin(), r.stop_tokens.end(), result.generated.back()) !=
            r.stop_tokens.end());
    if (result.reason == generate::finish_reason::max_positions)
      CHECK(r.prompt.size() + result.generated.size() == 64);
  }
  CHECK(small.cache().pool().free_count() == 40);  // no block leaks
  CHECK(small.preemption_count() > 0);
  CHECK(tight.steps_with_decode_and_prefill > 0);  // chunked prefill runs beside the decodes
  CHECK(tight.chunked_prompts > 0);                // prompts longer than a step's budget came in chunks
  // First come, first served: no request ran before an earlier one.
  CHECK(std::is_sorted(tight.first_scheduled.begin(), tight.first_scheduled.end()));

  // The same requests, submitted in reverse order, with room for all at once: no preemption, other
  // batches, and the same tokens (the recomputed sequences and the seeded draws agree).
  const generate::scheduler_options roomy{
      .vocab_size = vocab, .max_batched_tokens = 4096, .max_sequences = 100};
  generate::scheduler large(cache_of(2000, 16, 64), roomy);
  std::map<generate::request_id, std::size_t> request_of;
  for (std::size_t r = requests.size(); r-- > 0;) request_of[large.submit(requests[r])] = r;
  const run_record free_run = drive(large, 2000, 16, roomy);
  CHECK(large.preemption_count() == 0);
  REQUIRE(free_run.results.size() == 100);
  int preempted_requests = 0;
  for (const auto& [id, result] : free_run.results) {
    const auto& tight_result = tight.results.at(static_cast<generate::request_id>(request_of.at(id)));
    INFO("request " << request_of.at(id));
    CHECK(result.generated == tight_result.generated);
    CHECK(result.reason == tight_result.reason);
    preempted_requests += tight_result.preemptions > 0;
  }
  CHECK(preempted_requests > 0);
}

TEST_CASE("a decode that needs a block preempts the most recently admitted sequence", "[generate]") {
  // 4 blocks of 2 tokens. Two prompts of 3 tokens take 2 blocks each; after one decode each, both
  // blocks are full, and A's next token needs a block.
  const generate::scheduler_options options{
      .vocab_size = vocab, .max_batched_tokens = 16, .max_sequences = 4};
  generate::scheduler s(cache_of(4, 2, 16), options);
  fake_runner runner(4, 2);
  const auto a = s.submit({.prompt = {1, 2, 3}, .max_new_tokens = 5});
  const auto b = s.submit({.prompt = {4, 5, 6}, .max_new_tokens = 5});

  auto step = s.schedule();  // both admitted, whole prompts
  REQUIRE(step.sequences.size() == 2);
  CHECK(step.sequences[0].id == a);
  CHECK(step.sequences[1].block_table == std::vector<generate::block_id>{2, 3});
  s.complete(runner.run(step));
  step = s.schedule();  // one decode each, into the blocks' second slots
  REQUIRE(step.sequences.size() == 2);
  CHECK(step.preempted.empty());
  s.complete(runner.run(step));

  step = s.schedule();
  CHECK(step.preempted == std::vector<generate::request_id>{b});
  REQUIRE(step.sequences.size() == 2);
  CHECK(step.sequences[0].id == a);  // A decodes in B's freed block...
  CHECK_FALSE(step.sequences[0].prefill);
  CHECK(step.sequences[0].block_table == std::vector<generate::block_id>{0, 1, 3});
  CHECK(step.sequences[1].id == b);  // ...and B, first in the queue, recomputes into the other one
  CHECK(step.sequences[1].prefill);
  CHECK(step.sequences[1].first_position == 0);
  CHECK(step.sequences[1].tokens.size() == 2);
  CHECK_FALSE(step.sequences[1].samples);
  CHECK(generate::step_text(step) ==
        "step: 2 sequences, 3 tokens; preempted 1\n"
        "  request 0: decode position 4, blocks [0, 1, 3], samples\n"
        "  request 1: prefill positions [0, 2), blocks [2]");
  s.complete(runner.run(step));
  while (s.has_work()) s.complete(runner.run(s.schedule()));
  auto results = s.take_finished();
  REQUIRE(results.size() == 2);
  CHECK(s.cache().pool().free_count() == 4);

  // B alone gives the same tokens.
  generate::scheduler alone(cache_of(4, 2, 16), options);
  fake_runner alone_runner(4, 2);
  alone.submit({.prompt = {4, 5, 6}, .max_new_tokens = 5});
  while (alone.has_work()) alone.complete(alone_runner.run(alone.schedule()));
  const auto b_alone = alone.take_finished();
  const auto& b_shared = results[0].id == b ? results[0] : results[1];
  CHECK(b_shared.preemptions >= 1);
  CHECK(b_shared.generated == b_alone.at(0).generated);
}

TEST_CASE("admission is first come, first served, within max_sequences and the token budget", "[generate]") {
  const generate::scheduler_options options{
      .vocab_size = vocab, .max_batched_tokens = 10, .max_sequences = 2};
  generate::scheduler s(cache_of(100, 4, 64), options);
  fake_runner runner(100, 4);
  for (int r = 0; r < 4; ++r) s.submit({.prompt = std::vector<token_id>(6, r), .max_new_tokens = 2});
  auto step = s.schedule();  // request 0's prompt (6), then 4 tokens of request 1's: the budget
  REQUIRE(step.sequences.size() == 2);
  CHECK(step.sequences[0].id == 0);
  CHECK(step.sequences[1].id == 1);
  CHECK(step.sequences[1].tokens.size() == 4);
  CHECK(step.tokens == 10);
  CHECK(s.waiting_count() == 2);
  s.complete(runner.run(step));
  step = s.schedule();  // 0 decodes, 1 finishes its prompt; 2 waits: max_sequences
  REQUIRE(step.sequences.size() == 2);
  CHECK(step.sequences[0].id == 0);
  CHECK(step.sequences[1].id == 1);
  CHECK(step.sequences[1].first_position == 4);
  s.complete(runner.run(step));  // 0 has its 2 new tokens: it leaves
  step = s.schedule();
  REQUIRE(step.sequences.size() == 2);
  CHECK(step.sequences[0].id == 1);
  CHECK(step.sequences[1].id == 2);
}

TEST_CASE("a bad request fails alone, with its error; the others go on", "[generate]") {
  const generate::scheduler_options options{
      .vocab_size = vocab, .max_batched_tokens = 16, .max_sequences = 4};
  generate::scheduler s(cache_of(4, 4, 32), options);  // 16 token slots
  fake_runner runner(4, 4);
  s.submit({.prompt = {1, 2}, .max_new_tokens = 3});
  s.submit({.prompt = {1, 2}, .max_new_tokens = 0});
  s.submit({.prompt = {1, 99}});
  s.submit({.prompt = {}});
  s.submit({.prompt = std::vector<token_id>(32, 1)});
  s.submit({.prompt = {1}, .sampling = {.top_p = 2}});
  s.submit({.prompt = {1}, .max_new_tokens = 20});  // 20 tokens to cache: 5 blocks
  s.submit({.prompt = {1}, .stop_tokens = {64}});
  s.submit({.prompt = {3, 4}, .max_new_tokens = 2});
  std::map<generate::request_id, generate::generation_result> results;
  for (auto& r : s.take_finished()) results[r.id] = r;
  while (s.has_work()) {
    s.complete(runner.run(s.schedule()));
    for (auto& r : s.take_finished()) results[r.id] = r;
  }
  REQUIRE(results.size() == 9);
  const auto error = [&](generate::request_id id) { return results.at(id).error; };
  CHECK(results.at(0).generated.size() == 3);
  CHECK(error(1) ==
        "shardgraph: request 1: max_new_tokens is 0, not positive. ask for at least one new token");
  CHECK(error(2) ==
        "shardgraph: request 2: prompt token 1 is 99, outside the vocabulary [0, 64). give ids of this "
        "model's tokenizer");
  CHECK_THAT(error(3), ContainsSubstring("request 3: the prompt is empty"));
  CHECK(error(4) ==
        "shardgraph: request 4: the prompt's 32 tokens leave no room for a new token in the model's 32 "
        "positions. "
        "give a prompt of at most 31 tokens");
  CHECK_THAT(error(5), ContainsSubstring("request 5: top_p is 2.000000, outside (0, 1]"));
  CHECK(error(6) ==
        "shardgraph: kv cache: request 6 needs 5 blocks of 4 tokens for the 20 tokens it may feed the model, "
        "but "
        "the pool holds 4. give a larger --kv-memory, or a shorter prompt or max_new_tokens");
  CHECK_THAT(error(7), ContainsSubstring("request 7: stop token 0 is 64, outside the vocabulary"));
  for (const generate::request_id id : {1, 2, 3, 4, 5, 6, 7})
    CHECK(results.at(id).reason == generate::finish_reason::failed);
  CHECK(results.at(8).reason == generate::finish_reason::max_new_tokens);
  CHECK(results.at(8).generated.size() == 2);
}

TEST_CASE("the scheduler refuses steps out of order and sampled tokens that do not match", "[generate]") {
  using shardgraph::testing::error_of;
  generate::scheduler s(cache_of(8, 4, 32),
                        {.vocab_size = vocab, .max_batched_tokens = 8, .max_sequences = 2});
  s.submit({.prompt = {1, 2}});
  const auto step = s.schedule();
  CHECK_THAT(error_of([&] { s.schedule(); }),
             ContainsSubstring("scheduler::schedule: the previous step is not complete"));
  CHECK_THAT(error_of([&] { s.complete({}); }),
             ContainsSubstring("scheduler::complete: 0 sampled tokens for a step with 1 sampling sequences"));
  const std::vector<token_id> outside{vocab};
  CHECK_THAT(error_of([&] { s.complete(outside); }),
             ContainsSubstring("sampled token 0 is 64, outside the vocabulary"));
  CHECK_THAT(error_of([] {
               generate::scheduler bad(cache_of(8, 4, 32),
                                       {.vocab_size = vocab, .max_batched_tokens = 4, .max_sequences = 8});
             }),
             ContainsSubstring("max_sequences is 8 with max_batched_tokens 4"));
}

TEST_CASE("a cancelled request leaves at once with its tokens so far and frees its blocks", "[generate]") {
  using shardgraph::testing::error_of;
  generate::scheduler s(cache_of(8, 4, 32),
                        {.vocab_size = vocab, .max_batched_tokens = 8, .max_sequences = 1});
  fake_runner runner(8, 4);
  const auto running = s.submit({.prompt = {1, 2, 3, 4, 5}, .max_new_tokens = 10});
  const auto waiting = s.submit({.prompt = {6}, .max_new_tokens = 10});
  const auto step = s.schedule();
  CHECK_THAT(error_of([&] { s.cancel(running); }),
             ContainsSubstring("scheduler::cancel: request 0 is in the step being run"));
  s.complete(runner.run(step));
  CHECK(s.cache().pool().free_count() == 6);
  CHECK(s.cancel(waiting));
  CHECK(s.cancel(running));
  CHECK_FALSE(s.cancel(running));
  CHECK_FALSE(s.has_work());
  CHECK(s.cache().pool().free_count() == 8);
  const auto results = s.take_finished();
  REQUIRE(results.size() == 2);
  CHECK(results[0].id == waiting);
  CHECK(results[0].generated.empty());
  CHECK(results[1].reason == generate::finish_reason::cancelled);
  CHECK(results[1].generated.size() == 1);
}

TEST_CASE("a sequence stops at a stop token, at max_new_tokens or at the model's last position",
          "[generate]") {
  generate::scheduler s(cache_of(16, 4, 32),
                        {.vocab_size = vocab, .max_batched_tokens = 64, .max_sequences = 4});
  fake_runner runner(16, 4);
  const std::vector<token_id> prompt{5, 6, 7};
  // Greedy on the fake model: find the first generated token, then stop on it.
  s.submit({.prompt = prompt, .max_new_tokens = 5});
  s.submit({.prompt = std::vector<token_id>(30, 1), .max_new_tokens = 10});  // 32 positions: 2 new tokens
  std::map<generate::request_id, generate::generation_result> results;
  while (s.has_work()) {
    s.complete(runner.run(s.schedule()));
    for (auto& r : s.take_finished()) results[r.id] = r;
  }
  CHECK(results.at(0).reason == generate::finish_reason::max_new_tokens);
  CHECK(results.at(0).generated.size() == 5);
  CHECK(results.at(1).reason == generate::finish_reason::max_positions);
  CHECK(results.at(1).generated.size() == 2);

  const token_id first = results.at(0).generated.at(0);
  s.submit({.prompt = prompt, .max_new_tokens = 5, .stop_tokens = {first}});
  while (s.has_work()) s.complete(runner.run(s.schedule()));
  const auto stopped = s.take_finished();
  REQUIRE(stopped.size() == 1);
  CHECK(stopped[0].reason == generate::finish_reason::stop_token);
  CHECK(stopped[0].generated == std::vector<token_id>{first});  // the stop token is kept
  CHECK(s.cache().pool().free_count() == 16);
}
