// run_generation (generate/runner.hpp) over the generation programs of kv_cache_test.cpp: greedy
// tokens equal repeated full forwards under chunked prefill and preemption, on one rank, tp = 2 and
// pp = 2; seeded sampling alike on every layout; and bindings at other sizes sharing one copy of
// the weights and the KV cache (runtime/shared_parameters.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <shardgraph/generate/runner.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/plan/print_plan_memory.hpp>
#include <shardgraph/runtime/kv_cache.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "support/golden_comparison.hpp"
#include "kv_cache_testing.hpp"

namespace sg = shardgraph;
using namespace kv_cache_testing;

namespace {

// The programs, compiled at run time here (kv_cache_test.cpp compiles them at compile time and
// checks their steps).
const sg::program gpt2_generation = sg::compile_graph(gpt2_model(), sg::inference{.kv_cache = true});
const sg::program llama_forward = sg::compile_graph(llama_model());
const sg::program llama_generation = sg::compile_graph(llama_model(), sg::inference{.kv_cache = true});
using test_support::relative_difference;

}  // namespace

namespace {

// Greedy generation by repeated full forward (no cache) + argmax: the reference of the runner.
std::vector<std::int64_t> greedy_without_cache(std::vector<std::int64_t> tokens, std::int64_t new_tokens,
                                               sg::threads::communicator& comm) {
  std::vector<std::int64_t> generated;
  for (std::int64_t n = 0; n < new_tokens; ++n) {
    const std::vector<double> logits = forward_last(llama_forward, llama_golden, tokens, comm);
    generated.push_back(std::max_element(logits.begin(), logits.end()) - logits.begin());
    tokens.push_back(generated.back());
  }
  return generated;
}

// The golden LLaMA's cache on one rank (2 layers, 12 kv heads of 4, f64) in blocks of 4 tokens,
// and a scheduler over it with 8 tokens a step.
sg::generate::kv_cache_size runner_cache_size(std::int64_t blocks) {
  return {.shape = {.layers = 2,
                    .local_kv_heads = 12,
                    .head_dim = 4,
                    .dtype_bytes = 8,
                    .max_positions = 32,
                    .block_tokens = 4},
          .blocks = blocks};
}
sg::generate::scheduler runner_scheduler(const sg::generate::kv_cache_size& size) {
  return {size, {.vocab_size = llama_golden.vocab, .max_batched_tokens = 8, .max_sequences = 4}};
}

// random_weights(7, 0.2), counting in `reads` how often each parameter is read.
sg::weight_source counting_weights(std::map<std::string, int>& reads) {
  return [&reads, random = sg::random_weights(7, 0.2)](std::string_view name, const sg::tensor_slice& slice,
                                                       sg::host_tensor& out) {
    ++reads[std::string(name)];
    random(name, slice, out);
  };
}

struct runner_run {
  std::vector<sg::generate::generation_result> results;
  std::int64_t preemptions = 0, partial_chunks = 0, mixed_steps = 0, binds = 0;
  std::int64_t shared_calls = 0;  // calls of several rows (on a pipeline: several micro-batches)
  std::map<std::string, int> weight_reads;  // parameter name -> times the weight source filled it
  std::int64_t blocks_left_held = -1;  // after the run: 0, every block back in the pool
};

// The scheduler over a pool of `blocks` blocks of 4 tokens and 8 tokens a step, run by
// run_generation on tp thread ranks. Rank 0's results; every rank must agree.
runner_run run_requests(const std::vector<sg::generate::generation_request>& requests, const generation_layout& layout,
                        std::int64_t blocks = 6, std::int64_t max_bindings = 8) {
  const sg::generate::kv_cache_size size = runner_cache_size(blocks);
  const sg::kv_cache_shape cache{.blocks = size.blocks, .block_tokens = 4, .max_blocks = 8};
  std::vector<runner_run> runs(static_cast<std::size_t>(layout.ranks()));
  sg::threads::world(layout.ranks()).run([&](sg::threads::communicator& comm) {
    runner_run& run = runs[static_cast<std::size_t>(comm.rank())];
    sg::generate::scheduler s = runner_scheduler(size);
    for (const auto& r : requests) s.submit(r);
    const sg::weight_source counted = counting_weights(run.weight_reads);
    // On a pipeline a binding holds a micro-batch's rows.
    auto bind_rank = [&](std::int64_t rows, std::int64_t seq, const auto& parameters) {
      ++run.binds;
      sg::model_sizes sizes = llama_golden.sizes(rows / sg::pipeline_micro_batches(rows, layout.pp), seq);
      auto rank = sg::bind(llama_generation, sg::set_kv_cache_sizes(sizes, cache), comm, sg::cpu::backend{},
                           layout.mesh(), parameters, {.stage_layers = layout.stage_layers});
      if (run.binds > 1) return rank;  // the first binding's cache, which every later one shares
      // A slot read before it is written would make the logits NaN (0 x NaN under the causal mask too).
      rank.for_each_parameter([&](const std::string&, const sg::node& p, std::int64_t, auto& value, auto*) {
        if (!p.kv_cache) return;
        const std::vector<double> poison(static_cast<std::size_t>(rank.local_numel(p)), std::nan(""));
        rank.backend().upload(value, poison.data());
      });
      return rank;
    };
    auto observe = [&](const sg::generate::scheduled_step& step) {
      bool decodes = false, prefills = false;
      for (const auto& q : step.sequences) {
        decodes |= !q.prefill;
        prefills |= q.prefill;
        if (q.prefill && q.first_position == 0 && !q.samples) ++run.partial_chunks;  // a prompt cut in chunks
      }
      run.mixed_steps += decodes && prefills;
      std::map<std::size_t, int> rows_by_tokens;  // the runner's groups: one call each
      for (const auto& q : step.sequences) ++rows_by_tokens[q.tokens.size()];
      for (auto [tokens, rows] : rows_by_tokens) run.shared_calls += rows > 1;
    };
    run.results = sg::generate::run_generation(
        s, bind_rank, counted,
        {.max_blocks = cache.max_blocks, .max_bindings = max_bindings, .on_step = observe});
    run.preemptions = s.preemption_count();
    run.blocks_left_held = s.cache().pool().held_count();
  });
  for (const runner_run& other : runs) {
    REQUIRE(other.results.size() == runs[0].results.size());
    CHECK(other.blocks_left_held == 0);
    CHECK(other.binds > 1);
    CHECK(!other.weight_reads.empty());
    for (const auto& [name, reads] : other.weight_reads) {  // once, however many bindings
      CAPTURE(name);
      CHECK(reads == 1);
    }
    for (std::size_t i = 0; i < other.results.size(); ++i)
      CHECK(other.results[i].generated == runs[0].results[i].generated);
  }
  return runs[0];
}

}  // namespace

// Five prompts of different lengths over a pool too small to hold them: prompts are cut into
// chunks, decodes run beside prefills, sequences are preempted and recomputed into blocks others
// wrote before (never cleared), and each request still generates what repeated full forwards give.
TEST_CASE("run_generation gives greedy decoding's tokens under chunked prefill and preemption",
          "[runtime][threads]") {
  const std::vector<std::vector<std::int64_t>> prompts{{4, 9, 33},
                                                       {60, 1, 8, 8, 30, 12, 7, 5, 44},
                                                       {17, 2},
                                                       {3, 3, 50, 21, 9, 10},
                                                       {11, 40, 8, 26, 35, 1, 19, 2, 6, 58, 13}};
  std::vector<sg::generate::generation_request> requests;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    requests.push_back({.prompt = prompts[i], .max_new_tokens = static_cast<std::int64_t>(4 + i % 3)});
  std::vector<std::vector<std::int64_t>> want;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    for (const auto& r : requests) want.push_back(greedy_without_cache(r.prompt, r.max_new_tokens, comm));
  });
  const generation_layout layouts[] = {{}, {.tp = 2}, {.pp = 2}};
  for (const generation_layout& layout : layouts) {
    CAPTURE(layout.tp, layout.pp);
    const runner_run run = run_requests(requests, layout);
    CHECK(run.preemptions > 0);
    CHECK(run.partial_chunks > 0);
    CHECK(run.mixed_steps > 0);
    CHECK(run.shared_calls > 0);
    REQUIRE(run.results.size() == requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
      CAPTURE(i);
      CHECK(run.results[i].reason == sg::generate::finish_reason::max_new_tokens);
      CHECK(run.results[i].generated == want[i]);
    }
  }
  // One binding kept: the others are dropped and bound again, sharing the first one's weights and
  // cache after it is gone.
  const runner_run few = run_requests(requests, {}, 6, 1), many = run_requests(requests, {});
  CHECK(few.binds > many.binds);
  for (std::size_t i = 0; i < requests.size(); ++i) CHECK(few.results[i].generated == want[i]);
}

// The same seeds give the same tokens on one rank and on tp = 2, and with preemptions as with room
// for every request (the draw depends on the seed and the token's index only).
TEST_CASE("run_generation samples with seeds alike on every layout and after preemption",
          "[runtime][threads]") {
  const std::vector<std::vector<std::int64_t>> prompts{
      {4, 9, 33}, {60, 1, 8, 8, 30, 12, 7, 5, 44}, {17, 2}, {3, 3, 50, 21, 9, 10}};
  std::vector<sg::generate::generation_request> requests, greedy;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    requests.push_back({.prompt = prompts[i],
                        .max_new_tokens = 6,
                        .sampling = {.temperature = 1.5, .top_k = 40, .top_p = 0.95, .seed = 100 + i}});
    greedy.push_back({.prompt = prompts[i], .max_new_tokens = 6});
  }
  const runner_run one = run_requests(requests, {}), two = run_requests(requests, {.tp = 2}),
                   staged = run_requests(requests, {.pp = 2}), roomy = run_requests(requests, {}, 32);
  CHECK(one.preemptions > 0);
  CHECK(roomy.preemptions == 0);
  const runner_run argmax = run_requests(greedy, {}, 32);
  bool sampled_differs = false;  // the sampler, not the argmax, picked the tokens
  for (std::size_t i = 0; i < requests.size(); ++i) {
    CAPTURE(i);
    CHECK(one.results[i].generated.size() == 6);
    CHECK(two.results[i].generated == one.results[i].generated);
    CHECK(staged.results[i].generated == one.results[i].generated);
    CHECK(roomy.results[i].generated == one.results[i].generated);
    sampled_differs |= one.results[i].generated != argmax.results[i].generated;
  }
  CHECK(sampled_differs);
}

TEST_CASE("run_generation refuses block tables wider than the bindings' kv_context", "[runtime][threads]") {
  const sg::generate::kv_cache_size size = runner_cache_size(6);
  const sg::kv_cache_shape cache{.blocks = size.blocks, .block_tokens = 4, .max_blocks = 1};
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    sg::generate::scheduler s = runner_scheduler(size);
    s.submit({.prompt = {4, 9, 33, 2, 17, 8}, .max_new_tokens = 2});
    auto bind_rank = [&](std::int64_t rows, std::int64_t seq, const auto& parameters) {
      sg::model_sizes sizes = llama_golden.sizes(rows, seq);
      return sg::bind(llama_generation, sg::set_kv_cache_sizes(sizes, cache), comm, sg::cpu::backend{},
                      sg::mesh_shape{{"dp", 1}, {"tp", 1}}, parameters);
    };
    const sg::weight_source weights = sg::random_weights(7, 0.2);
    CHECK_THROWS_WITH(sg::generate::run_generation(s, bind_rank, weights, {.max_blocks = 0}),
                      sg::testing::ContainsSubstring("run_generation: max_blocks is 0"));
    CHECK_THROWS_WITH(
        sg::generate::run_generation(s, bind_rank, weights, {.max_blocks = 8, .max_bindings = 0}),
        sg::testing::ContainsSubstring("run_generation: max_bindings is 0"));
    // Bindings that read their own weights would each hold a cache of their own.
    auto own_weights = [&](std::int64_t rows, std::int64_t seq, const auto&) {
      sg::model_sizes sizes = llama_golden.sizes(rows, seq);
      sg::set_kv_cache_sizes(sizes, {.blocks = size.blocks, .block_tokens = 4, .max_blocks = 8});
      return sg::bind(llama_generation, sizes, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", 1}, {"tp", 1}},
                      weights);
    };
    sg::generate::scheduler two_steps = runner_scheduler(size);
    two_steps.submit({.prompt = {4, 9, 33}, .max_new_tokens = 2});
    CHECK_THROWS_WITH(
        sg::generate::run_generation(two_steps, own_weights, weights, {.max_blocks = 8}),
        sg::testing::ContainsSubstring("run_generation: the binding for batch 1, seq 1 holds its own "
                                       "parameters. pass make_rank's `parameters` to bind"));
    CHECK_THROWS_WITH(sg::generate::run_generation(s, bind_rank, weights, {.max_blocks = 1}),
                      sg::testing::ContainsSubstring(
                          "run_generation: request 0 holds 2 blocks, more than the bindings' max_blocks 1"));
  });
}

namespace {

// LLaMA's generation program at (batch, seq) with a pool of `blocks` blocks.
sg::model_sizes llama_cache_sizes(std::int64_t rows, std::int64_t seq, std::int64_t blocks = pool) {
  sg::model_sizes s = llama_golden.sizes(rows, seq);
  return sg::set_kv_cache_sizes(s,
                                {.blocks = blocks, .block_tokens = block_tokens, .max_blocks = max_blocks});
}

// name -> (the first byte of this rank's slice, its bytes), kv cache or weights.
template <class Rank>
std::map<std::string, std::pair<const std::byte*, std::size_t>> parameter_memory(Rank& rank, bool kv_cache) {
  std::map<std::string, std::pair<const std::byte*, std::size_t>> memory;
  rank.for_each_parameter([&](const std::string& name, const sg::node& p, std::int64_t, auto& value, auto*) {
    if (p.kv_cache == kv_cache) memory.emplace(name, std::pair{value.bytes(), value.size_bytes()});
  });
  return memory;
}

}  // namespace

// A binding at other sizes (rebind, or bind with share_parameters()) reads no weights and uses the
// same weight and cache buffers; it reports them as shared, and they outlive the binding that read them.
TEST_CASE("Bindings at other sizes share one copy of the weights and the KV cache", "[runtime][threads]") {
  const std::vector<std::vector<std::int64_t>> rows{{4, 9, 33, 2, 17}, {60, 1, 8, 8, 30}};
  sg::threads::world(2).run([&](sg::threads::communicator& comm) {
    const sg::mesh_shape mesh{{"dp", 1}, {"tp", 2}};
    std::map<std::string, int> reads;
    const sg::weight_source counted = counting_weights(reads);
    auto decode = [&] {  // the binding that read the weights is gone when decode runs
      auto prefill = sg::bind(llama_generation, llama_cache_sizes(batch, prompt), comm, sg::cpu::backend{},
                              mesh, counted);
      const std::map<std::string, int> read_by_prefill = reads;
      auto one = prefill.rebind(llama_cache_sizes(batch, 1));
      auto other = sg::bind(llama_generation, llama_cache_sizes(1, 3), comm, sg::cpu::backend{}, mesh,
                            one.share_parameters());
      CHECK(reads == read_by_prefill);
      CHECK(!reads.empty());
      for (const auto& [name, count] : reads) CHECK(count == 1);
      for (bool cache : {false, true}) {
        CAPTURE(cache);
        const auto memory = parameter_memory(prefill, cache);
        CHECK(!memory.empty());
        CHECK(parameter_memory(one, cache) == memory);  // the same bytes, not copies
        CHECK(parameter_memory(other, cache) == memory);
      }
      CHECK(prefill.shares_parameters_with(one));
      int in_layer_blocks = 0;  // k and v weights batched per layer: one block shared as a whole
      const sg::plan::bound_plan bound = prefill.plan();
      for (int i = 0; i < bound.compiled.nodes.size(); ++i)
        in_layer_blocks += bound.compiled.nodes[i].kind == sg::op::parameter &&
                           bound.memory.values[std::size_t(i)].kind == sg::plan::storage::layer_block;
      CHECK(in_layer_blocks > 0);
      const sg::memory_report owner = prefill.memory(), sharer = other.memory();
      CHECK(owner.shared_parameters + owner.shared_kv_cache == 0);
      CHECK(sharer.parameters + sharer.kv_cache == 0);
      CHECK(sharer.shared_parameters == owner.parameters);
      CHECK(sharer.shared_kv_cache == owner.kv_cache);
      CHECK(owner.kv_cache > 0);
      std::ostringstream plan;
      sg::plan::print_plan_memory(other.plan(), plan);
      CHECK(plan.str().find("weights and KV cache of another binding (not in the total)") !=
            std::string::npos);
      prefill.forward(step_inputs(rows, 0, true));  // writes the prompt's cache
      return one;
    }();
    // The decode binding goes on from the prompt's cache, which the binding that wrote it left behind.
    std::vector<std::vector<std::int64_t>> longer = rows;
    for (auto& row : longer) row.push_back(21);
    const sg::host_tensor got = decode.forward(step_inputs(longer, prompt, true)).at("logits");
    auto whole = sg::bind(llama_generation, llama_cache_sizes(batch, prompt + 1), comm, sg::cpu::backend{},
                          mesh, sg::random_weights(7, 0.2));
    const sg::host_tensor want = whole.forward(step_inputs(longer, 0, true)).at("logits");
    for (std::int64_t b = 0; b < batch; ++b)
      CHECK(relative_difference(last_logits(got, b, llama_golden.vocab),
                                last_logits(want, b, llama_golden.vocab)) < 1e-12);
  });
}

TEST_CASE("Shared parameters are refused where a size changes their shape, and for training",
          "[runtime][threads]") {
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    const sg::mesh_shape mesh{{"dp", 1}, {"tp", 1}};
    auto rank = sg::bind(llama_generation, llama_cache_sizes(batch, prompt), comm, sg::cpu::backend{}, mesh,
                         sg::random_weights(7, 0.2));
    CHECK_THROWS_WITH(
        rank.rebind(llama_cache_sizes(batch, 1, 2 * pool)),
        sg::testing::ContainsSubstring(
            "bind: shared parameters: parameter 'layers.self_attn.kv_cache' is (16, 12, 8, 4) on this "
            "rank at these sizes, (8, 12, 8, 4) in the binding that holds the shared parameters. share "
            "parameters only between bindings"));
    sg::models::llama_config wider = llama_golden;
    wider.model = 128;
    sg::model_sizes wide = wider.sizes(batch, 1);
    sg::set_kv_cache_sizes(wide, {.blocks = pool, .block_tokens = block_tokens, .max_blocks = max_blocks});
    CHECK_THROWS_WITH(
        sg::bind(llama_generation, wide, comm, sg::cpu::backend{}, mesh, rank.share_parameters()),
        sg::testing::ContainsSubstring("parameter 'embed_tokens.weight' is (64, 128) on this rank"));
    sg::model_sizes gpt2_sizes = gpt2_golden.sizes(batch, 1);
    sg::set_kv_cache_sizes(gpt2_sizes,
                           {.blocks = pool, .block_tokens = block_tokens, .max_blocks = max_blocks});
    CHECK_THROWS_WITH(
        sg::bind(gpt2_generation, gpt2_sizes, comm, sg::cpu::backend{}, mesh, rank.share_parameters()),
        sg::testing::ContainsSubstring("bind: shared parameters: this program has other parameters"));
    const auto training = sg::compile_graph(llama_model(), sg::training{});
    REQUIRE(training.ok());
    auto trained = sg::bind(training, llama_golden.sizes(batch, 4), comm, sg::cpu::backend{}, mesh,
                            sg::random_weights(7, 0.2));
    CHECK_THROWS_WITH(
        trained.share_parameters(),
        sg::testing::ContainsSubstring("share_parameters: the program trains: each binding holds its "
                                       "own gradients"));
    CHECK_THROWS_WITH(sg::bind(training, llama_golden.sizes(batch, 4), comm, sg::cpu::backend{}, mesh,
                               rank.share_parameters()),
                      sg::testing::ContainsSubstring("bind: shared parameters: the program trains"));
  });
}
