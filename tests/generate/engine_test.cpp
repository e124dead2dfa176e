// The engine (generate/engine.hpp) on the golden llama checkpoint in f64 over thread ranks:
// requests submitted from several threads at staggered times give llm::generate's ids (greedy
// and seeded) on one rank, tp = 2 and dp = 2, and again after the first ones finished (one engine,
// a long life); an idle engine does not spin; cancel ends a request with its blocks freed;
// shutdown with requests in flight cancels or finishes them; bad requests fail alone, and so do
// the requests of a replica whose rank failed.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/generate/engine.hpp>
#include <shardgraph/generate/llm.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"

namespace sg = shardgraph;
namespace gen = shardgraph::generate;
using cpu_engine = gen::engine<sg::cpu::backend, sg::threads::world>;
using cpu_llm = gen::llm<sg::cpu::backend, sg::threads::world>;
using sg::testing::ContainsSubstring;

namespace {

const std::string llama = std::string(SHARDGRAPH_GOLDEN_DIR) + "/llama";

gen::llm_options golden_options(const std::string& mesh) {
  return {.mesh = sg::mesh_shape::parse(mesh),
          .type = sg::dtype::f64,
          .kv_memory = gen::parse_kv_memory("1MiB"),
          .max_batched_tokens = 16,
          .max_sequences = 4};
}

// Prompts of 2 to 9 ids below the golden vocabulary of 61; even ones greedy, odd ones seeded.
const std::vector<gen::llm_prompt> prompts{
    std::vector<gen::token_id>{4, 9, 33},     std::vector<gen::token_id>{60, 1, 8, 8, 30, 12, 7, 5, 44},
    std::vector<gen::token_id>{17, 2},        std::vector<gen::token_id>{3, 3, 50, 21, 9, 10},
    std::vector<gen::token_id>{11, 5, 7, 40}, std::vector<gen::token_id>{29, 31}};

gen::generation_params params_of(std::size_t i) {
  if (i % 2 == 0) return {.max_new_tokens = 8, .ignore_eos = true};
  return {.max_new_tokens = 7,
          .sampling = {.temperature = 1.5, .top_k = 40, .top_p = 0.95, .seed = 100 + i},
          .ignore_eos = true};
}

// What an engine's callbacks delivered, per request, keyed by the order of submission here
// (the callbacks may run before submit returns the engine's handle).
struct delivered {
  std::mutex lock;
  std::condition_variable changed;
  std::map<int, gen::request_handle> handles;
  std::map<int, std::vector<gen::token_id>> streamed;
  std::map<int, gen::llm_output> finished;
  std::map<int, int> finish_calls;
  int submitted = 0;

  // Its on_token throws when `throwing` (a client gone away).
  int submit(cpu_engine& e, const gen::llm_prompt& prompt, const gen::generation_params& p,
             bool throwing = false) {
    int key = 0;
    {
      std::lock_guard<std::mutex> guard(lock);
      key = submitted++;
    }
    const gen::request_handle h = e.submit(
        prompt, p,
        [this, key, throwing](gen::token_id id, std::string_view) {
          if (throwing) throw std::runtime_error("client went away");
          std::lock_guard<std::mutex> g(lock);
          streamed[key].push_back(id);
        },
        [this, key](const gen::llm_output& out) {
          std::lock_guard<std::mutex> g(lock);  // notified under it: the waiter may end `this` next
          finished[key] = out;
          ++finish_calls[key];
          changed.notify_all();
        });
    std::lock_guard<std::mutex> guard(lock);
    handles[key] = h;
    return key;
  }
  void wait_for(std::size_t count) {
    std::unique_lock<std::mutex> guard(lock);
    const bool done =
        changed.wait_for(guard, std::chrono::seconds(30), [&] { return finished.size() >= count; });
    REQUIRE(done);
  }
};

// Submits prompts 0..5 from 3 threads (two each, staggered) and waits for all; returns the
// outputs in prompt order.
std::vector<gen::llm_output> serve_from_threads(cpu_engine& e) {
  delivered d;
  std::vector<int> keys(prompts.size());
  std::vector<std::thread> clients;
  for (std::size_t t = 0; t < 3; ++t)
    clients.emplace_back([&, t] {
      for (std::size_t i = t; i < prompts.size(); i += 3) {
        std::this_thread::sleep_for(std::chrono::milliseconds(3 * static_cast<int>(i)));
        keys[i] = d.submit(e, prompts[i], params_of(i));
      }
    });
  for (std::thread& c : clients) c.join();
  d.wait_for(prompts.size());
  std::vector<gen::llm_output> outputs;
  std::lock_guard<std::mutex> guard(d.lock);
  for (const int h : keys) {
    CHECK(d.finish_calls[h] == 1);
    CHECK(d.streamed[h] == d.finished[h].ids);  // the stream is the result, in order
    outputs.push_back(d.finished[h]);
  }
  return outputs;
}

}  // namespace

TEST_CASE("engine serves requests from threads as llm::generate does, for a long life",
          "[generate][threads]") {
  std::vector<gen::generation_params> params;
  for (std::size_t i = 0; i < prompts.size(); ++i) params.push_back(params_of(i));
  const std::vector<gen::llm_output> expected =
      cpu_llm(llama, golden_options("tp=1")).generate(prompts, params, {});
  for (const std::string mesh : {"tp=1", "tp=2", "dp=2"}) {
    CAPTURE(mesh);
    cpu_engine e(llama, golden_options(mesh));
    for (int round = 0; round < 2; ++round) {  // the second after the first ones finished
      CAPTURE(round);
      const std::vector<gen::llm_output> got = serve_from_threads(e);
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].error.empty());
        CHECK(got[i].reason == gen::finish_reason::max_new_tokens);
        CHECK(got[i].ids == expected[i].ids);
      }
      const gen::engine_stats s = e.stats();
      CHECK(s.running == 0);
      CHECK(s.waiting == 0);
      CHECK(s.kv_blocks_used == 0);
      CHECK(s.kv_blocks_total == e.model().kv_cache().blocks * (mesh == "dp=2" ? 2 : 1));
      CHECK(s.generated_tokens == (round + 1) * (3 * 8 + 3 * 7));  // three greedy, three seeded
      CHECK(s.finished_requests == (round + 1) * 6);
      CHECK(s.tokens_per_second > 0);
    }
    const std::clock_t before = std::clock();  // an idle engine waits, it does not spin
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(static_cast<double>(std::clock() - before) / CLOCKS_PER_SEC < 0.05);
  }
}

TEST_CASE("engine cancel ends a request mid-way and frees its blocks", "[generate][threads]") {
  const gen::generation_params longest{.max_new_tokens = 28, .ignore_eos = true};
  const std::vector<gen::token_id> full =
      cpu_llm(llama, golden_options("tp=1")).generate({prompts[0]}, longest)[0].ids;
  REQUIRE(full.size() == 28);
  cpu_engine e(llama, golden_options("tp=2"));
  bool landed_mid_way = false;
  for (int attempt = 0; attempt < 20 && !landed_mid_way; ++attempt) {
    delivered d;
    const int other = d.submit(e, prompts[2], params_of(2));
    const int h = d.submit(e, prompts[0], longest);
    for (;;) {  // cancel as soon as its first token has come
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::lock_guard<std::mutex> guard(d.lock);
      if (!d.streamed[h].empty() || d.finished.contains(h)) break;
    }
    const bool accepted = e.cancel(d.handles.at(h));
    d.wait_for(2);
    std::lock_guard<std::mutex> guard(d.lock);
    const gen::llm_output& out = d.finished[h];
    CHECK(d.finished[other].reason == gen::finish_reason::max_new_tokens);  // the other goes on
    CHECK(d.finished[other].ids.size() == 8);
    CHECK(out.ids == std::vector<gen::token_id>(full.begin(),
                                                full.begin() + static_cast<std::ptrdiff_t>(out.ids.size())));
    if (out.reason == gen::finish_reason::cancelled) {
      CHECK(accepted);
      CHECK(out.ids.size() < 28);
      CHECK(d.streamed[h] == out.ids);
      landed_mid_way = true;
    } else {
      CHECK(out.reason == gen::finish_reason::max_new_tokens);  // it ended before the cancel came
    }
    const gen::engine_stats s = e.stats();
    CHECK(s.kv_blocks_used == 0);
    CHECK(s.running == 0);
  }
  CHECK(landed_mid_way);
  CHECK_FALSE(e.cancel(12345));  // unknown handle
}

TEST_CASE("engine shutdown with requests in flight returns cleanly", "[generate][threads]") {
  for (const bool cancel_running : {true, false}) {
    CAPTURE(cancel_running);
    delivered d;
    {
      cpu_engine e(llama, golden_options("dp=2"));
      for (std::size_t i = 0; i < 4; ++i) d.submit(e, prompts[i], {.max_new_tokens = 20, .ignore_eos = true});
      e.shutdown(cancel_running);
      CHECK(d.finished.size() == 4);  // every on_finish has run when shutdown returns
      for (const auto& [handle, out] : d.finished) {
        CHECK(d.finish_calls[handle] == 1);
        if (!cancel_running) CHECK(out.reason == gen::finish_reason::max_new_tokens);
        if (cancel_running)
          CHECK((out.reason == gen::finish_reason::cancelled ||
                 out.reason == gen::finish_reason::max_new_tokens));
      }
      const int late = d.submit(e, prompts[0], {});  // fails at once, here
      CHECK(d.finished[late].reason == gen::finish_reason::failed);
      CHECK_THAT(d.finished[late].error, ContainsSubstring("shut down"));
    }  // the destructor after shutdown does nothing more
  }
}

TEST_CASE("engine fails a bad request alone", "[generate][threads]") {
  cpu_engine e(llama, golden_options("tp=1"));
  delivered d;
  const int good = d.submit(e, prompts[0], params_of(0));
  const int outside = d.submit(e, std::vector<gen::token_id>{4, 61}, {});
  const int text = d.submit(e, std::string("no tokenizer"), {});
  const int none = d.submit(e, prompts[2], {.max_new_tokens = 0});
  const int too_long = d.submit(e, std::vector<gen::token_id>(32, 3), {});
  d.wait_for(5);
  std::lock_guard<std::mutex> guard(d.lock);
  CHECK(d.finished[good].reason == gen::finish_reason::max_new_tokens);
  CHECK(d.finished[good].ids.size() == 8);
  CHECK_THAT(d.finished[outside].error, ContainsSubstring("outside the vocabulary"));
  CHECK_THAT(d.finished[text].error, ContainsSubstring("has no tokenizer"));
  CHECK_THAT(d.finished[none].error, ContainsSubstring("max_new_tokens is 0"));
  CHECK_THAT(d.finished[too_long].error, ContainsSubstring("leave no room"));
  for (const int h : {outside, text, none, too_long})
    CHECK(d.finished[h].reason == gen::finish_reason::failed);
  CHECK(e.stats().kv_blocks_used == 0);
}

TEST_CASE("engine cancels a request whose callback throws", "[generate][threads]") {
  cpu_engine e(llama, golden_options("tp=1"));
  bool landed_mid_way = false;
  for (int attempt = 0; attempt < 20 && !landed_mid_way; ++attempt) {
    delivered d;
    const int throwing = d.submit(e, prompts[2], {.max_new_tokens = 28, .ignore_eos = true}, true);
    d.wait_for(1);
    std::lock_guard<std::mutex> guard(d.lock);
    const gen::finish_reason reason = d.finished[throwing].reason;
    CHECK((reason == gen::finish_reason::cancelled || reason == gen::finish_reason::max_new_tokens));
    landed_mid_way = reason == gen::finish_reason::cancelled;
    CHECK(e.stats().kv_blocks_used == 0);
  }
  CHECK(landed_mid_way);
}

TEST_CASE("engine fails the requests of a replica whose rank failed", "[generate][threads]") {
  cpu_engine e(llama, golden_options("tp=2"), nullptr, [](int) -> sg::cpu::backend {
    sg::fail("test backend", "cannot start", "nothing to fix: the test makes it fail");
  });
  delivered d;
  const int first = d.submit(e, prompts[0], params_of(0));  // its ranks fail at their first bind
  d.wait_for(1);
  const int later = d.submit(e, prompts[1], params_of(1));  // no replica is left
  d.wait_for(2);
  std::lock_guard<std::mutex> guard(d.lock);
  CHECK(d.finished[first].reason == gen::finish_reason::failed);
  CHECK_THAT(d.finished[first].error, ContainsSubstring("test backend: cannot start"));
  CHECK(d.finished[later].reason == gen::finish_reason::failed);
  CHECK_THAT(d.finished[later].error, ContainsSubstring("every replica has failed"));
}
