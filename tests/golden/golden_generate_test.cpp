// Greedy generation equals HF transformers' generate(do_sample=False), token for token: the
// checkpoints in tests/golden/{gpt2,llama}_generate (generate_golden.py) opened by open_hf_model,
// their generation program (inference{.kv_cache = true}) driven by run_generation in f64, every
// prompt of generate.json submitted at once (continuous batching: prompts prefilled in chunks of
// at most 16 tokens a step beside the others' decodes), the model's eos as the stop token. On one
// rank, tp = 2, pp = 2, dp = 2 replicas, and their products.
//
// dp in generation is independent replicas sharing the requests (vLLM's data parallelism): each
// replica is a tp x pp group with its own scheduler and cache, serving requests i with
// i % dp == its index. A batch split inside one program (dp on the mesh) cannot serve continuous
// batching: a sequence's cache lives on the dp rank that holds its row, and the runner regroups
// rows every step.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/generate/hf_cache_shape.hpp>
#include <shardgraph/generate/runner.hpp>
#include <shardgraph/io/hf_model.hpp>
#include <shardgraph/io/json.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/runtime/kv_cache.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;
namespace gen = shardgraph::generate;

namespace {

const std::string golden_dir = SHARDGRAPH_GOLDEN_DIR;

struct golden_prompt {
  std::vector<gen::token_id> prompt, generated;
  std::string finish;  // "stop_token" or "max_new_tokens", as the script saw HF stop
};

struct golden_generation {
  std::int64_t max_new_tokens = 0;
  gen::token_id eos = 0;
  std::vector<golden_prompt> prompts;
};

std::vector<gen::token_id> ids_of(const sg::io::json::value& array) {
  std::vector<gen::token_id> ids;
  for (const auto& v : array.as_array()) ids.push_back(v.as_int());
  return ids;
}

golden_generation read_golden(const std::string& dir) {
  const sg::io::json::value file = sg::io::read_json_file(dir + "/generate.json");
  golden_generation g{file.at("max_new_tokens").as_int(), file.at("eos_token_id").as_int(), {}};
  for (const auto& p : file.at("prompts").as_array())
    g.prompts.push_back({ids_of(p.at("prompt")), ids_of(p.at("generated")), p.at("finish").as_string()});
  return g;
}

// A layout of the generation: dp replicas of tp x pp thread ranks each.
struct layout {
  int dp = 1, tp = 1, pp = 1;
};
// pp = 2 puts one of the models' two layers on each stage (the embedding with the first, the head
// with the last), each stage holding its layer's cache.
const std::vector<layout> layouts{{},        {.tp = 2},          {.pp = 2},
                                  {.dp = 2}, {.dp = 2, .tp = 2}, {.tp = 2, .pp = 2}};

constexpr std::int64_t block_tokens = 16;
constexpr std::int64_t blocks = 16;  // per replica: 256 tokens, room for every prompt at once

// One replica's cache as the scheduler plans it: `blocks` blocks of `block_tokens` tokens, each
// holding the keys and values of the rank's kv heads (tp shards them) in every layer, in f64.
gen::kv_cache_size scheduler_cache(const sg::io::hf_model& m, const layout& l) {
  const sg::mesh_shape mesh{{"dp", 1}, {"tp", l.tp}, {"pp", l.pp}};
  return {.shape = gen::hf_cache_shape(m, mesh, block_tokens), .blocks = blocks};
}

// What one rank saw: its replica's results, in the order of the prompts it served.
struct rank_run {
  std::vector<std::size_t> served;
  std::vector<gen::generation_result> results;
  std::int64_t blocks_held_after = -1;  // 0: every block back in the pool
  std::int64_t mixed_steps = 0;         // steps that ran a prefill chunk beside decodes
  std::int64_t cache_bytes = 0;         // the KV cache one binding holds on this rank
};

// One rank of replica `replica` (its tp x pp group in `comm`): serves prompts i % dp == replica.
rank_run serve_replica(const std::string& dir, const golden_generation& golden, const layout& l, int replica,
                       sg::threads::communicator& comm) {
  const sg::io::hf_model m = sg::io::open_hf_model(dir, {.type = sg::dtype::f64, .vocab_multiple = l.tp});
  const sg::mesh_shape mesh{{"dp", 1}, {"tp", l.tp}, {"pp", l.pp}};
  const gen::kv_cache_size size = scheduler_cache(m, l);
  const sg::kv_cache_shape cache{
      .blocks = blocks, .block_tokens = block_tokens, .max_blocks = size.shape.blocks_for(m.positions)};
  gen::scheduler s(size, {.vocab_size = m.vocab, .max_batched_tokens = 16, .max_sequences = 8});
  rank_run run;
  for (std::size_t i = 0; i < golden.prompts.size(); ++i)
    if (static_cast<int>(i % static_cast<std::size_t>(l.dp)) == replica) {
      s.submit({.prompt = golden.prompts[i].prompt,
                .max_new_tokens = golden.max_new_tokens,
                .stop_tokens = {golden.eos}});
      run.served.push_back(i);
    }
  auto bind_rank = [&](std::int64_t batch, std::int64_t seq, const auto& parameters) {
    sg::model_sizes sizes = m.sizes(batch, seq);
    auto rank = sg::bind(m.generation, sg::set_kv_cache_sizes(sizes, cache), comm, sg::cpu::backend{}, mesh,
                         parameters);
    run.cache_bytes = std::max(run.cache_bytes, rank.memory().kv_cache);  // the first binding's: the others share it
    return rank;
  };
  auto count_mixed = [&](const gen::scheduled_step& step) {
    bool prefills = false, decodes = false;
    for (const gen::scheduled_sequence& q : step.sequences) (q.prefill ? prefills : decodes) = true;
    run.mixed_steps += prefills && decodes;
  };
  run.results = gen::run_generation(s, bind_rank, m.weights(nullptr), {.max_blocks = cache.max_blocks, .on_step = count_mixed});
  run.blocks_held_after = s.cache().pool().held_count();
  return run;
}

struct layout_run {
  std::vector<gen::generation_result> results;  // every request's, in the order of the prompts
  std::vector<std::int64_t> cache_bytes;        // per rank
};

// The requests run on layout `l`; every rank of a replica must give the same results.
layout_run run_layout(const std::string& dir, const golden_generation& golden, const layout& l) {
  const int group = l.tp * l.pp;
  std::vector<rank_run> runs(static_cast<std::size_t>(l.dp * group));
  sg::threads::world(l.dp * group).run([&](sg::threads::communicator& world) {
    const int replica = world.rank() / group;
    sg::threads::communicator comm = world.split(replica, world.rank() % group);
    runs[static_cast<std::size_t>(world.rank())] = serve_replica(dir, golden, l, replica, comm);
  });
  layout_run out{std::vector<gen::generation_result>(golden.prompts.size()), {}};
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const rank_run& run = runs[r];
    out.cache_bytes.push_back(run.cache_bytes);
    CAPTURE(r);
    REQUIRE(run.results.size() == run.served.size());
    CHECK(run.blocks_held_after == 0);
    CHECK(run.mixed_steps > 0);  // the prompts ran together, not one after another
    for (std::size_t k = 0; k < run.served.size(); ++k) {
      if (r % static_cast<std::size_t>(group) == 0)
        out.results[run.served[k]] = run.results[k];
      else
        CHECK(run.results[k].generated == runs[r - r % static_cast<std::size_t>(group)].results[k].generated);
    }
  }
  return out;
}

void check_against_hf(const std::string& model) {
  const std::string dir = golden_dir + "/" + model;
  const golden_generation golden = read_golden(dir);
  REQUIRE(golden.prompts.size() >= 4);
  std::int64_t one_rank_cache = 0;
  for (const layout& l : layouts) {
    CAPTURE(model, l.dp, l.tp, l.pp);
    const layout_run run = run_layout(dir, golden, l);
    if (one_rank_cache == 0) one_rank_cache = run.cache_bytes.at(0);  // layouts[0] is one rank
    for (std::int64_t bytes : run.cache_bytes)  // tp shards each layer's cache, pp splits the layers
      CHECK(bytes * l.tp * l.pp == one_rank_cache);
    const std::vector<gen::generation_result>& results = run.results;
    for (std::size_t i = 0; i < golden.prompts.size(); ++i) {
      CAPTURE(i, golden.prompts[i].prompt.size(), results[i].error);
      CHECK(results[i].generated == golden.prompts[i].generated);
      CHECK(gen::finish_reason_name(results[i].reason) == golden.prompts[i].finish);
    }
  }
}

}  // namespace

TEST_CASE("Greedy GPT-2 generation equals HF generate on every layout", "[golden][threads]") {
  check_against_hf("gpt2_generate");
}

TEST_CASE("Greedy grouped-query LLaMA generation equals HF generate on every layout", "[golden][threads]") {
  check_against_hf("llama_generate");
}
