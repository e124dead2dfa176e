// Generation programs (inference{.kv_cache = true}): a prompt's prefill then decode steps, each
// feeding the argmax token, give at every step the logits of the full-sequence forward's last
// position (f64), for GPT-2 and LLaMA (grouped-query) at the golden models' widths, on one rank,
// tp = 2, dp = 2 x tp = 2, and on pipeline stages (pp = 2, with tp = 2 or dp = 2, even and uneven
// stages, a step's rows split into micro-batches). The cache is paged: each row's blocks are
// scattered in the pool. run_generation (generate/runner.hpp) drives a scheduler over these
// programs: kv_cache_runner_test.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <shardgraph/models/gpt2.hpp>
#include <shardgraph/models/llama.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/plan/print_plan_memory.hpp>
#include <shardgraph/program/print_text.hpp>
#include <shardgraph/generate/runner.hpp>
#include <shardgraph/runtime/kv_cache.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "support/golden_comparison.hpp"
#include "kv_cache_testing.hpp"

namespace sg = shardgraph;

namespace {

using namespace kv_cache_testing;

constexpr sg::program gpt2_forward = sg::compile<gpt2_model>();
constexpr sg::program gpt2_generation = sg::compile<gpt2_model, sg::inference{.kv_cache = true}>();
constexpr sg::program llama_forward = sg::compile<llama_model>();
constexpr sg::program llama_generation = sg::compile<llama_model, sg::inference{.kv_cache = true}>();

// One cached attention per block (one program node, run per layer); the cache is placed like the
// keys it stores, so no collective moves it.
static_assert(gpt2_generation.count(sg::op::cached_attention) == 1 && gpt2_generation.count(sg::op::attention) == 0);
static_assert(llama_generation.count(sg::op::cached_attention) == 1);
static_assert(gpt2_generation.count(sg::op::all_gather) == gpt2_forward.count(sg::op::all_gather));
static_assert(llama_forward.count(sg::op::cached_attention) == 0);
// Generation reads the logits: the loss, its targets and its vocabulary-parallel statistics are
// left out (the forward's last two tp all-reduces), the logits' all-gather stays.
static_assert(gpt2_generation.count(sg::op::cross_entropy) == 0 && gpt2_generation.count(sg::op::all_reduce, "tp") == 3);
static_assert(llama_generation.count(sg::op::cross_entropy) == 0 && llama_generation.count(sg::op::all_reduce, "tp") == 3);
static_assert(gpt2_forward.count(sg::op::all_reduce, "tp") == 5 && llama_forward.count(sg::op::all_reduce, "tp") == 5);

struct generation_result {
  std::vector<std::vector<std::int64_t>> tokens;  // each row's prompt and generated tokens
  double worst = 0;                               // the largest relative difference of any step
  std::vector<double> last;                       // the last step's logits, every row
};

using test_support::relative_difference;

// Prefill, then `steps` decodes, on the layout's thread ranks; each step's logits checked against
// a forward over the whole sequence so far. Rank 0's result.
template <class Config>
generation_result generate(const sg::program& forward, const sg::program& generation, const Config& config,
                           const generation_layout& layout) {
  const sg::mesh_shape mesh = layout.mesh();
  // micro_batches is the training schedule's: a forward-only program keeps one slot whatever it is.
  const sg::pipeline_options pipe{.micro_batches = 4, .stage_layers = layout.stage_layers};
  const sg::kv_cache_shape cache{.blocks = pool * layout.dp, .block_tokens = block_tokens, .max_blocks = max_blocks};
  std::vector<generation_result> results(static_cast<std::size_t>(layout.ranks()));
  sg::threads::world(layout.ranks()).run([&](sg::threads::communicator& comm) {
    generation_result& r = results[static_cast<std::size_t>(comm.rank())];
    for (std::int64_t b = 0; b < batch; ++b) {
      r.tokens.emplace_back();
      for (std::int64_t t = 0; t < prompt; ++t) r.tokens.back().push_back((7 * b + 11 * t + 3) % config.vocab);
    }
    auto bind_sizes = [&](std::int64_t seq, bool cached) {
      sg::model_sizes s = config.sizes(cached ? batch / layout.micro_batches : batch, seq);
      return cached ? sg::set_kv_cache_sizes(s, cache) : s;
    };
    auto weights = sg::random_weights(7, 0.2);
    auto prefill = sg::bind(generation, bind_sizes(prompt, true), comm, sg::cpu::backend{}, mesh, weights, pipe);
    auto decode = prefill.rebind(bind_sizes(1, true));  // its weights and cache: goes on from the prompt
    // Each stage holds the caches of its own layers only (the prefill binding owns them).
    std::int64_t layers_held = 0;
    for (auto [first, end] : prefill.pipeline_chunks()) layers_held += end - first;
    if (!prefill.pipelined()) layers_held = config.layers;
    CHECK((layout.pp == 1 || layers_held < config.layers));
    CHECK(prefill.memory().kv_cache ==
          pool * sg::kv_cache_bytes_per_block(generation, bind_sizes(1, true), mesh, layers_held));
    CHECK(decode.memory().shared_kv_cache == prefill.memory().kv_cache);
    CHECK(decode.memory().micro_batches_in_flight == 1);
    sg::host_tensor logits = prefill.forward(step_inputs(r.tokens, 0, true)).at("logits");
    for (std::int64_t step = 0;; ++step) {
      const auto length = static_cast<std::int64_t>(r.tokens[0].size());
      auto whole = sg::bind(forward, bind_sizes(length, false), comm, sg::cpu::backend{}, mesh, weights, pipe);
      const sg::host_tensor reference = whole.forward(step_inputs(r.tokens, 0, false)).at("logits");
      for (std::int64_t b = 0; b < batch; ++b) {
        const std::vector<double> got = last_logits(logits, b, config.vocab), want = last_logits(reference, b, config.vocab);
        r.worst = std::max(r.worst, relative_difference(got, want));
        if (step == steps) r.last.insert(r.last.end(), got.begin(), got.end());
        if (step < steps)
          r.tokens[static_cast<std::size_t>(b)].push_back(std::max_element(got.begin(), got.end()) - got.begin());
      }
      if (step == steps) break;
      logits = decode.forward(step_inputs(r.tokens, length, true)).at("logits");
    }
  });
  for (const generation_result& other : results) REQUIRE(other.tokens == results[0].tokens);
  return results[0];
}

template <class Config>
void check_generation(const sg::program& forward, const sg::program& generation, const Config& config) {
  const generation_result one = generate(forward, generation, config, {});
  CHECK(one.worst < 1e-9);
  for (const auto& row : one.tokens) REQUIRE(row.size() == std::size_t(prompt + steps));
  const generation_layout layouts[] = {{.tp = 2}, {.dp = 2, .tp = 2}, {.pp = 2, .micro_batches = 2},
                                       {.tp = 2, .pp = 2, .micro_batches = 2}, {.pp = 2}, {.dp = 2, .pp = 2}};
  for (const generation_layout& layout : layouts) {
    CAPTURE(layout.dp, layout.tp, layout.pp, layout.micro_batches);
    const generation_result sharded = generate(forward, generation, config, layout);
    CHECK(sharded.worst < 1e-9);
    CHECK(sharded.tokens == one.tokens);
    CHECK(relative_difference(sharded.last, one.last) < 1e-9);
  }
}

}  // namespace

TEST_CASE("GPT-2 generation: prefill and decode logits equal the full forward's", "[runtime][threads]") {
  check_generation(gpt2_forward, gpt2_generation, gpt2_golden);
}

TEST_CASE("LLaMA generation with grouped-query attention: prefill and decode equal the full forward", "[runtime][threads]") {
  check_generation(llama_forward, llama_generation, llama_golden);
}

// Stages of 1 and 3 layers (and 3 and 1), as a device map that fills one device first runs them.
TEST_CASE("LLaMA generation on uneven pipeline stages equals one rank's", "[runtime][threads]") {
  sg::models::llama_config four_layers = llama_golden;
  four_layers.layers = 4;
  const generation_result one = generate(llama_forward, llama_generation, four_layers, {});
  CHECK(one.worst < 1e-9);
  const generation_layout layouts[] = {{.pp = 2, .stage_layers = {1, 3}, .micro_batches = 2},
                                       {.tp = 2, .pp = 2, .stage_layers = {3, 1}, .micro_batches = 2}};
  for (const generation_layout& layout : layouts) {
    CAPTURE(layout.tp, layout.stage_layers);
    const generation_result staged = generate(llama_forward, llama_generation, four_layers, layout);
    CHECK(staged.worst < 1e-9);
    CHECK(staged.tokens == one.tokens);
    CHECK(relative_difference(staged.last, one.last) < 1e-9);
  }
}

// Two kv heads over tp = 4: each kv head is held by the two ranks whose query heads read it, as
// Megatron-LM replicates them; the cache is replicated with it.
TEST_CASE("LLaMA generation with fewer kv heads than tensor-parallel ranks", "[runtime][threads]") {
  const sg::models::llama_config few_kv_heads{.vocab = 61, .model = 32, .ffn = 64, .heads = 8, .kv_heads = 2,
                                              .layers = 2, .padded_vocab = 64};
  const generation_result one = generate(llama_forward, llama_generation, few_kv_heads, {});
  const generation_result four = generate(llama_forward, llama_generation, few_kv_heads, {.tp = 4});
  CHECK(one.worst < 1e-9);
  CHECK(four.worst < 1e-9);
  CHECK(four.tokens == one.tokens);
  CHECK(relative_difference(four.last, one.last) < 1e-9);
  sg::model_sizes sizes = few_kv_heads.sizes(batch, 1);
  sg::set_kv_cache_sizes(sizes, {.blocks = pool, .block_tokens = block_tokens, .max_blocks = max_blocks});
  // 2 layers x 1 kv head per rank x 2 x 4 tokens x head_dim 4 x 8 bytes
  CHECK(sg::kv_cache_bytes_per_block(llama_generation, sizes, sg::mesh_shape{{"dp", 1}, {"tp", 4}}) == 2 * 1 * 2 * 4 * 4 * 8);
}

TEST_CASE("Training refuses kv heads replicated over tensor-parallel ranks", "[runtime][threads]") {
  const sg::models::llama_config few_kv_heads{.vocab = 64, .model = 32, .ffn = 64, .heads = 8, .kv_heads = 2, .layers = 1};
  const auto training = sg::compile_graph(llama_model(), sg::training{});  // at run time: no constexpr cost
  REQUIRE(training.ok());
  sg::threads::world(4).run([&](sg::threads::communicator& comm) {
    CHECK_THROWS_WITH(sg::bind(training, few_kv_heads.sizes(batch, 4), comm, sg::cpu::backend{},
                               sg::mesh_shape{{"dp", 1}, {"tp", 4}}, sg::random_weights(7, 0.2)),
                      sg::testing::ContainsSubstring("kv_heads = 2 is fewer than tp = 4: each kv head would be "
                                                     "replicated on 2 ranks, which only inference does"));
  });
}

TEST_CASE("A generation program prints its caches and where they are written", "[program]") {
  std::ostringstream text;
  sg::print_program(text, llama_generation);
  const std::string printed = text.str();
  CAPTURE(printed);
  CHECK(printed.find("layers.{layer}.self_attn.kv_cache") != std::string::npos);
  CHECK(printed.find("KV cache (state") != std::string::npos);
  CHECK(printed.find("cached_attention") != std::string::npos);
  CHECK(printed.find("writes, reads 'layers.self_attn.kv_cache' at 'kv_context'") != std::string::npos);
}

TEST_CASE("A kv_context that the cache cannot serve is a clear error", "[runtime][threads]") {
  const sg::kv_cache_shape cache{.blocks = pool, .block_tokens = block_tokens, .max_blocks = 2};
  sg::model_sizes sizes = gpt2_golden.sizes(batch, prompt);
  sg::set_kv_cache_sizes(sizes, cache);
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(gpt2_generation, sizes, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", 1}, {"tp", 1}},
                         sg::random_weights(7, 0.2));
    sg::tensor_map inputs;
    inputs.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, prompt}, std::vector<std::int64_t>(batch * prompt, 1)));
    auto with_context = [&](std::vector<std::int32_t> context) {  // rows [tokens, block, block]
      inputs.insert_or_assign("kv_context", sg::host_tensor::from<std::int32_t>({batch, 3}, context));
      return inputs;
    };
    // Checked on the host before the step, on every rank alike.
    CHECK_THROWS_WITH(rank.forward(with_context({9, 0, 1, 5, 2, 3})),
                      sg::testing::ContainsSubstring("forward: input 'kv_context': row 0 of kv_context needs 3 cache blocks for 9 tokens"));
    CHECK_THROWS_WITH(rank.forward(with_context({5, 0, 1, 3, 2, 3})),
                      sg::testing::ContainsSubstring("row 1 of kv_context says 3 tokens are cached after this step, fewer than the step's 5"));
    CHECK_THROWS_WITH(rank.forward(with_context({5, 0, 1, 5, 2, 9})),
                      sg::testing::ContainsSubstring("row 1 of kv_context names cache block 9, but this rank holds 8"));
    CHECK_THROWS_WITH(rank.forward(with_context({33, 0, 1, 5, 2, 3})),
                      sg::testing::ContainsSubstring("row 0 of kv_context reaches position 32, past the 32 learned positions"));
    CHECK_NOTHROW(rank.forward(with_context({5, 0, 1, 5, 2, 3})));
  });
}

TEST_CASE("A prompt prefilled in two chunks gives the one-chunk prefill's logits", "[runtime][threads]") {
  const sg::kv_cache_shape cache{.blocks = pool, .block_tokens = block_tokens, .max_blocks = max_blocks};
  auto sizes = [&](std::int64_t seq) {
    sg::model_sizes s = llama_golden.sizes(batch, seq);
    return sg::set_kv_cache_sizes(s, cache);
  };
  std::vector<std::vector<std::int64_t>> rows{{4, 9, 33, 2, 17}, {60, 1, 8, 8, 30}};
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    const sg::mesh_shape mesh{{"dp", 1}, {"tp", 1}};
    auto weights = sg::random_weights(7, 0.2);
    auto whole = sg::bind(llama_generation, sizes(prompt), comm, sg::cpu::backend{}, mesh, weights);
    auto first = sg::bind(llama_generation, sizes(3), comm, sg::cpu::backend{}, mesh, weights);
    auto second =
        sg::bind(llama_generation, sizes(2), comm, sg::cpu::backend{}, mesh, first.share_parameters());
    const sg::host_tensor want = whole.forward(step_inputs(rows, 0, true)).at("logits");
    std::vector<std::vector<std::int64_t>> head{{rows[0].begin(), rows[0].begin() + 3}, {rows[1].begin(), rows[1].begin() + 3}};
    first.forward(step_inputs(head, 0, true));
    const sg::host_tensor got = second.forward(step_inputs(rows, 3, true)).at("logits");
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t t = 0; t < 2; ++t)
        for (std::int64_t j = 0; j < llama_golden.vocab; ++j)
          CHECK(std::abs(got.at((b * 2 + t) * 64 + j) - want.at((b * prompt + 3 + t) * 64 + j)) < 1e-12);
  });
}

TEST_CASE("A generation program needs an attention to cache and positions it can rotate", "[passes]") {
  auto no_attention = [] {
    sg::builder<Mesh> g(sg::dtype::f64);
    sg::tensor x = g.input("x", {sg::dim::batch, sg::dim::model}, sg::dtype::f64);
    sg::output(sg::linear(x, g.param("w", {sg::dim::model, sg::dim::model})), "y");
    return g.finish();
  };
  CHECK_THAT(std::string(sg::compile_graph(no_attention(), sg::inference{.kv_cache = true}).error()),
             sg::testing::ContainsSubstring("finds no causal self-attention inside a repeat block to cache"));
  const sg::graph dynamic = sg::models::llama<Mesh>(
      {.type = sg::dtype::f64, .rope = {.type = sg::rope_type::dynamic, .factor = 2, .original_max_positions = 32}});
  CHECK_THAT(std::string(sg::compile_graph(dynamic, sg::inference{.kv_cache = true}).error()),
             sg::testing::ContainsSubstring("rope 'layers.self_attn.rope': rope_type dynamic rescales"));
  CHECK(sg::compile_graph(dynamic, sg::inference{}).ok());  // the forward program is unaffected
  auto loss_only = [] {
    sg::builder<Mesh> g(sg::dtype::f64);
    sg::tensor ids = g.input("input_ids", {sg::dim::batch, sg::dim::seq}, sg::dtype::i64);
    sg::tensor x = sg::embedding(ids, g.param("wte.weight", {sg::dim::vocab, sg::dim::heads * sg::dim::head_dim}));
    x = sg::repeat("h", x, [](sg::graph_builder&, sg::tensor x) {
      return sg::merge_heads(sg::attention(sg::split_heads(x), sg::split_heads(x), sg::split_heads(x)));
    });
    sg::output(sg::cross_entropy(x, g.input("targets", {sg::dim::batch, sg::dim::seq}, sg::dtype::i64)), "loss");
    return g.finish();
  };
  CHECK_THAT(std::string(sg::compile_graph(loss_only(), sg::inference{.kv_cache = true}).error()),
             sg::testing::ContainsSubstring("returns the model's outputs other than its loss, and this model has none"));
}


// One decode step whose rows stand at different positions: row 0 appends its sixth token, row 1
// rewrites its third (its cache is then taken to hold two tokens before the step).
template <class Config>
void check_rows_at_own_positions(const sg::program& forward, const sg::program& generation, const Config& config) {
  const sg::kv_cache_shape cache{.blocks = pool, .block_tokens = block_tokens, .max_blocks = max_blocks};
  auto sizes = [&](std::int64_t seq) {
    sg::model_sizes s = config.sizes(batch, seq);
    return sg::set_kv_cache_sizes(s, cache);
  };
  const std::vector<std::vector<std::int64_t>> rows{{4, 9, 33, 2, 17}, {60, 1, 8, 8, 30}};
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    const sg::mesh_shape mesh{{"dp", 1}, {"tp", 1}};
    auto prefill = sg::bind(generation, sizes(prompt), comm, sg::cpu::backend{}, mesh, sg::random_weights(7, 0.2));
    auto decode = sg::bind(generation, sizes(1), comm, sg::cpu::backend{}, mesh, sg::random_weights(7, 0.2));
    prefill.forward(step_inputs(rows, 0, true));
    sg::copy_kv_cache(prefill, decode);
    sg::tensor_map step = step_inputs({{0, 42}, {0, 13}}, 1, true);  // tokens 42 and 13
    std::int32_t* context = reinterpret_cast<std::int32_t*>(step.at("kv_context").bytes().data());
    context[0] = 6;
    context[1 + max_blocks] = 3;
    const sg::host_tensor logits = decode.forward(step).at("logits");
    const std::vector<std::int64_t> row0{4, 9, 33, 2, 17, 42}, row1{60, 1, 13};
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::vector<double> want = forward_last(forward, config, b == 0 ? row0 : row1, comm);
      const std::vector<double> got = last_logits(logits, b, config.vocab);
      for (std::size_t j = 0; j < want.size(); ++j) CHECK(std::abs(got[j] - want[j]) < 1e-12);
    }
  });
}

TEST_CASE("A decode step's rows each stand at their own position", "[runtime][threads]") {
  SECTION("GPT-2: learned positions") { check_rows_at_own_positions(gpt2_forward, gpt2_generation, gpt2_golden); }
  SECTION("LLaMA: rotary positions") { check_rows_at_own_positions(llama_forward, llama_generation, llama_golden); }
}

TEST_CASE("pipeline_micro_batches: the fewest that divide the rows and fill the stages", "[runtime]") {
  CHECK(sg::pipeline_micro_batches(4, 2) == 2);
  CHECK(sg::pipeline_micro_batches(3, 2) == 3);
  CHECK(sg::pipeline_micro_batches(6, 4) == 6);
  CHECK(sg::pipeline_micro_batches(8, 4) == 4);
  CHECK(sg::pipeline_micro_batches(1, 2) == 1);
  CHECK(sg::pipeline_micro_batches(5, 1) == 1);
  CHECK_THROWS_WITH(sg::pipeline_micro_batches(0, 2), sg::testing::ContainsSubstring("pipeline_micro_batches: 0 rows on 2 stages"));
}

TEST_CASE("A pipeline's forward refuses rows it cannot split into micro-batches", "[runtime][threads]") {
  const sg::mesh_shape mesh{{"pp", 2}};
  sg::threads::world(2).run([&](sg::threads::communicator& comm) {
    sg::model_sizes sizes = gpt2_golden.sizes(2, 1);
    sg::set_kv_cache_sizes(sizes, {.blocks = pool, .block_tokens = block_tokens, .max_blocks = max_blocks});
    auto rank = sg::bind(gpt2_generation, sizes, comm, sg::cpu::backend{}, mesh, sg::random_weights(7, 0.2));
    sg::tensor_map inputs = step_inputs({{1}, {2}}, 0, true);
    inputs.insert_or_assign("input_ids", sg::host_tensor::from<std::int64_t>({3, 1}, std::vector<std::int64_t>{1, 2, 3}));
    CHECK_THROWS_WITH(rank.forward(inputs), sg::testing::ContainsSubstring(
                                                "forward: input 'input_ids': 3 rows are not a multiple of the bound batch of 2"));
    inputs.insert_or_assign("input_ids", sg::host_tensor::from<std::int64_t>({4, 1}, std::vector<std::int64_t>{1, 2, 3, 4}));
    CHECK_THROWS_WITH(rank.forward(inputs),
                      sg::testing::ContainsSubstring("input 'input_ids': holds 2 micro-batches of rows, but 'kv_context' holds 1"));
    // A loss has no rows to join: a forward program's loss comes from one micro-batch.
    auto whole = sg::bind(gpt2_forward, gpt2_golden.sizes(1, 2), comm, sg::cpu::backend{}, mesh, sg::random_weights(7, 0.2));
    CHECK_THROWS_WITH(whole.forward(step_inputs({{1, 2}, {3, 4}}, 0, false)),
                      sg::testing::ContainsSubstring(
                          "forward: output 'loss': it has no batch dimension to join the outputs of 2 micro-batches over"));
    CHECK(whole.forward(step_inputs({{1, 2}, {3, 4}}, 0, false), "logits").at("logits").shape() ==
          std::vector<std::int64_t>{2, 2, 64});
  });
}

TEST_CASE("make_kv_context joins block tables and context lengths", "[runtime]") {
  const sg::host_tensor tables = sg::host_tensor::from<std::int32_t>({2, 2}, std::vector<std::int32_t>{4, 1, 0, 3});
  const sg::host_tensor lengths = sg::host_tensor::from<std::int32_t>({2}, std::vector<std::int32_t>{7, 2});
  const sg::host_tensor context = sg::make_kv_context(tables, lengths);
  REQUIRE(context.shape() == std::vector<std::int64_t>{2, 3});
  const std::vector<double> want{7, 4, 1, 2, 0, 3};
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(context.at(static_cast<std::int64_t>(i)) == want[i]);
  CHECK_THROWS_WITH(sg::make_kv_context(tables, sg::host_tensor::from<std::int32_t>({3}, std::vector<std::int32_t>{1, 2, 3})),
                    sg::testing::ContainsSubstring("make_kv_context: block tables must be (batch, max_blocks) i32"));
}

TEST_CASE("kv_cache_bytes_per_block is what a rank holds per block, and memory() reports it", "[runtime][threads]") {
  const sg::kv_cache_shape cache{.blocks = pool, .block_tokens = block_tokens, .max_blocks = max_blocks};
  sg::model_sizes sizes = llama_golden.sizes(batch, 1);
  sg::set_kv_cache_sizes(sizes, cache);
  const sg::mesh_shape mesh{{"dp", 1}, {"tp", 2}};
  // 2 layers x (6 kv heads of 12 per rank) x 2 x 4 tokens x head_dim 4 x 8 bytes
  CHECK(sg::kv_cache_bytes_per_block(llama_generation, sizes, mesh) == 2 * 6 * 2 * 4 * 4 * 8);
  std::vector<std::int64_t> held(2, 0);
  sg::threads::world(2).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(llama_generation, sizes, comm, sg::cpu::backend{}, mesh, sg::random_weights(7, 0.2));
    rank.for_each_parameter([&](const std::string&, const sg::node& p, std::int64_t, auto&, auto*) {
      if (p.kv_cache) held[static_cast<std::size_t>(comm.rank())] += rank.local_numel(p) * 8;
    });
    CHECK(rank.memory().kv_cache == held[static_cast<std::size_t>(comm.rank())]);  // apart from the weights
    CHECK(rank.memory().parameters > 0);
    std::ostringstream plan;
    sg::plan::print_plan_memory(rank.plan(), plan);
    CHECK(plan.str().find("KV cache") != std::string::npos);
  });
  for (std::int64_t bytes : held) CHECK(bytes == pool * sg::kv_cache_bytes_per_block(llama_generation, sizes, mesh));
}

TEST_CASE("The cache's blocks divide over data-parallel ranks", "[runtime][threads]") {
  sg::model_sizes sizes = gpt2_golden.sizes(batch, 1);
  sg::set_kv_cache_sizes(sizes, {.blocks = 7, .block_tokens = block_tokens, .max_blocks = max_blocks});
  sg::threads::world(2).run([&](sg::threads::communicator& comm) {
    CHECK_THROWS_WITH(sg::bind(gpt2_generation, sizes, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", 2}, {"tp", 1}},
                               sg::random_weights(7, 0.2)),
                      sg::testing::ContainsSubstring("kv_blocks = 7 is not divisible by dp = 2"));
  });
}
