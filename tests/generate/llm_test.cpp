// The llm API (generate/llm.hpp) on the golden HF checkpoints in f64 over thread ranks: the same
// greedy and seeded ids on one rank, tp = 2 and dp = 2; the streaming callback sees exactly the
// returned ids, on the calling thread; text prompts through a tokenizer.json; bad requests fail
// alone. And the pieces it is made of: the replica assignment, the cache's bytes per block.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/generate/llm.hpp>
#include <shardgraph/text/tokenizer_codec.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "random_hf_checkpoint.hpp"

namespace sg = shardgraph;
namespace gen = shardgraph::generate;
using cpu_llm = gen::llm<sg::cpu::backend, sg::threads::world>;
using sg::testing::ContainsSubstring;

namespace {

const std::string golden = SHARDGRAPH_GOLDEN_DIR;

cpu_llm open_golden(const std::string& model, const std::string& mesh) {
  return cpu_llm(golden + "/" + model, {.mesh = sg::mesh_shape::parse(mesh),
                                        .type = sg::dtype::f64,
                                        .kv_memory = gen::parse_kv_memory("1MiB"),
                                        .max_batched_tokens = 16,
                                        .max_sequences = 4});
}

// Prompts of 2 to 9 ids below the golden vocabulary of 61.
std::vector<gen::llm_prompt> golden_prompts() {
  return {std::vector<gen::token_id>{4, 9, 33}, std::vector<gen::token_id>{60, 1, 8, 8, 30, 12, 7, 5, 44},
          std::vector<gen::token_id>{17, 2}, std::vector<gen::token_id>{3, 3, 50, 21, 9, 10}};
}

std::vector<std::vector<gen::token_id>> ids_of(const std::vector<gen::llm_output>& outputs) {
  std::vector<std::vector<gen::token_id>> ids;
  for (const gen::llm_output& o : outputs) ids.push_back(o.ids);
  return ids;
}

const std::vector<std::string> layouts{"tp=1", "tp=2", "dp=2", "dp=2,tp=2"};

// Greedy decoding without a cache: the argmax of a full forward's last position (the checkpoint's
// one-rank program), `new_tokens` times.
std::vector<gen::token_id> greedy_by_full_forwards(const sg::io::hf_model& m,
                                                   std::vector<gen::token_id> tokens,
                                                   std::int64_t new_tokens) {
  std::vector<gen::token_id> generated;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    for (std::int64_t n = 0; n < new_tokens; ++n) {
      const auto seq = static_cast<std::int64_t>(tokens.size());
      auto rank = sg::bind(m.single, m.sizes(1, seq), comm, sg::cpu::backend{}, sg::mesh_shape{},
                           m.weights(std::make_shared<std::atomic<std::uint64_t>>(0)));
      sg::tensor_map inputs;
      inputs.emplace("input_ids", sg::host_tensor::from<std::int64_t>({1, seq}, tokens));
      inputs.emplace("targets", sg::host_tensor::from<std::int64_t>({1, seq}, tokens));
      const sg::host_tensor logits = rank.forward(inputs).at("logits");
      const std::int64_t columns = logits.shape()[2];
      gen::token_id best = 0;
      for (gen::token_id v = 1; v < m.vocab; ++v)
        if (logits.at((seq - 1) * columns + v) > logits.at((seq - 1) * columns + best)) best = v;
      generated.push_back(best);
      tokens.push_back(best);
    }
  });
  return generated;
}

}  // namespace

TEST_CASE("llm gives the same greedy ids on every layout", "[generate][threads]") {
  for (const std::string model : {"llama", "gpt2"}) {
    CAPTURE(model);
    std::map<std::string, std::vector<gen::llm_output>> by_layout;
    for (const std::string& mesh : layouts) {
      CAPTURE(mesh);
      cpu_llm llm = open_golden(model, mesh);
      by_layout[mesh] = llm.generate(golden_prompts(), {.max_new_tokens = 8, .ignore_eos = true});
      const gen::generation_stats& stats = llm.last_stats();
      CHECK(stats.generated_tokens == 4 * 8);
      CHECK(stats.prefill_tokens == 3 + 9 + 2 + 6);  // the prompts, once each: nothing was preempted
      CHECK(stats.preemptions == 0);
      CHECK(stats.decode_tokens > 0);
      CHECK(stats.decode_tokens <= 4 * 7);  // the decodes beside a prefill chunk count as prefill
      CHECK(stats.decode_tokens_per_second() > 0);
    }
    const auto& one = by_layout.at("tp=1");
    for (std::size_t i = 0; i < one.size(); ++i) {
      CAPTURE(i);
      CHECK(one[i].error.empty());
      CHECK(one[i].reason == gen::finish_reason::max_new_tokens);
      CHECK(one[i].ids.size() == 8);
      CHECK(one[i].replica == 0);
      CHECK(one[i].prompt_tokens == static_cast<std::int64_t>(std::get<1>(golden_prompts()[i]).size()));
    }
    for (const std::string& mesh : layouts) CHECK(ids_of(by_layout.at(mesh)) == ids_of(one));
    const cpu_llm reference = open_golden(model, "tp=1");
    for (std::size_t i = 0; i < one.size(); ++i)
      CHECK(one[i].ids == greedy_by_full_forwards(reference.model(), std::get<1>(golden_prompts()[i]), 8));
    // Predicted tokens 11, 17, 10, 14 over two replicas: 0, 1, 0, 1 (replica_assignment.hpp).
    std::vector<int> replicas;
    for (const gen::llm_output& o : by_layout.at("dp=2")) replicas.push_back(o.replica);
    CHECK(replicas == std::vector<int>{0, 1, 0, 1});
  }
}

TEST_CASE("llm samples with a seed per request alike on every layout", "[generate][threads]") {
  std::vector<gen::generation_params> sampled, greedy;
  for (std::uint64_t i = 0; i < 4; ++i) {
    sampled.push_back({.max_new_tokens = 6,
                       .sampling = {.temperature = 1.5, .top_k = 40, .top_p = 0.95, .seed = 100 + i},
                       .ignore_eos = true});
    greedy.push_back({.max_new_tokens = 6, .ignore_eos = true});
  }
  std::vector<std::vector<gen::token_id>> first, argmax;
  for (const std::string& mesh : layouts) {
    CAPTURE(mesh);
    cpu_llm llm = open_golden("llama", mesh);
    const auto ids = ids_of(llm.generate(golden_prompts(), sampled, {}));
    if (first.empty()) {
      first = ids;
      argmax = ids_of(llm.generate(golden_prompts(), greedy, {}));  // the same llm, a second call
    }
    CHECK(ids == first);
  }
  CHECK(first != argmax);  // the sampler, not the argmax, picked the tokens
}

TEST_CASE("llm streams each request's tokens in order on the calling thread", "[generate][threads]") {
  cpu_llm llm = open_golden("gpt2", "dp=2,tp=2");
  std::map<std::int64_t, std::vector<gen::token_id>> streamed;
  bool other_thread = false;
  const std::thread::id caller = std::this_thread::get_id();
  const auto outputs = llm.generate(golden_prompts(), {.max_new_tokens = 7, .ignore_eos = true},
                                    [&](std::int64_t request, gen::token_id id, std::string_view piece) {
                                      other_thread |= std::this_thread::get_id() != caller;
                                      CHECK(piece.empty());  // no tokenizer
                                      streamed[request].push_back(id);
                                    });
  CHECK_FALSE(other_thread);
  REQUIRE(streamed.size() == outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i)
    CHECK(streamed.at(static_cast<std::int64_t>(i)) == outputs[i].ids);
}

TEST_CASE("llm stops at the checkpoint's eos unless told to ignore it", "[generate][threads]") {
  cpu_llm llm = open_golden("llama", "tp=1");
  REQUIRE(llm.model().eos_tokens == std::vector<std::int64_t>{2});  // config.json's eos_token_id
  const auto free = llm.generate(golden_prompts(), {.max_new_tokens = 8, .ignore_eos = true});
  // Make each request's third generated token a stop token: it ends there, keeping it.
  std::vector<gen::generation_params> stops;
  for (const gen::llm_output& o : free) stops.push_back({.max_new_tokens = 8, .stop_tokens = {o.ids[2]}});
  const auto stopped = llm.generate(golden_prompts(), stops, {});
  for (std::size_t i = 0; i < free.size(); ++i) {
    CAPTURE(i);
    const auto first_stop = std::find(free[i].ids.begin(), free[i].ids.end(), free[i].ids[2]) + 1;
    CHECK(stopped[i].reason == gen::finish_reason::stop_token);
    CHECK(stopped[i].ids == std::vector<gen::token_id>(free[i].ids.begin(), first_stop));
  }
}

TEST_CASE("llm fails a bad request alone", "[generate][threads]") {
  // A budget too small for one sequence of the 32 positions fails at once, saying what is needed.
  CHECK_THROWS_WITH(
      cpu_llm(golden + "/gpt2", {.type = sg::dtype::f64, .kv_memory = gen::parse_kv_memory("1KiB")}),
      ContainsSubstring("needs 2 blocks, 24576 bytes (0.02 MiB) per rank"));
  cpu_llm llm = open_golden("gpt2", "tp=2");
  std::vector<gen::llm_prompt> prompts = golden_prompts();
  prompts.push_back(std::vector<gen::token_id>(40, 5));     // 4: longer than the 32 positions
  prompts.push_back(std::vector<gen::token_id>{4, 61, 7});  // 5: 61 is outside the vocabulary
  prompts.push_back(std::vector<gen::token_id>{4, 9});      // 6: max_new_tokens 0
  prompts.push_back(std::string("a text prompt"));          // 7: no tokenizer.json
  std::vector<gen::generation_params> params(prompts.size(), {.max_new_tokens = 5, .ignore_eos = true});
  params[6].max_new_tokens = 0;
  const auto outputs = llm.generate(prompts, params, {});
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(outputs[i].reason == gen::finish_reason::max_new_tokens);
    CHECK(outputs[i].ids.size() == 5);
  }
  for (std::size_t i = 4; i < 8; ++i) {
    CHECK(outputs[i].reason == gen::finish_reason::failed);
    CHECK(outputs[i].ids.empty());
  }
  CHECK_THAT(outputs[4].error, ContainsSubstring("request 4: the prompt's 40 tokens leave no room"));
  CHECK_THAT(outputs[5].error,
             ContainsSubstring("request 5: prompt token 1 is 61, outside the vocabulary [0, 61)"));
  CHECK_THAT(outputs[6].error, ContainsSubstring("request 6: max_new_tokens is 0, not positive"));
  CHECK_THAT(outputs[7].error, ContainsSubstring("request 7: a text prompt, but"));
  CHECK_THAT(outputs[7].error, ContainsSubstring("has no tokenizer"));
}

TEST_CASE("llm generates from text through the checkpoint's tokenizer.json", "[generate][threads][text]") {
  // A random GPT-2 whose vocabulary is the test tokenizer's: 700 tokens and <|endoftext|> (700).
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("shardgraph_llm_test_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  sg::examples::random_hf_model spec;
  spec.family = "gpt2", spec.vocab = 701, spec.model = 16, spec.layers = 1, spec.heads = 2,
  spec.positions = 64;
  spec.kv_heads = 2, spec.ffn = 64, spec.threads = 1;
  sg::examples::write_random_hf_checkpoint(dir.string(), spec);
  std::filesystem::copy_file(std::string(SHARDGRAPH_SOURCE_DIR) + "/tests/text/tokenizers/gpt2.json",
                             dir / "tokenizer.json");
  const auto codec = sg::text::open_tokenizer_codec(dir.string());
  REQUIRE(codec != nullptr);
  cpu_llm llm(dir.string(),
              {.mesh = sg::mesh_shape::parse("tp=2"),
               .type = sg::dtype::f64,
               .kv_memory = gen::parse_kv_memory("1MiB")},
              codec);
  const std::vector<gen::llm_prompt> prompts{std::string("Hello world, how are you?"),
                                             std::string("caf\xc3\xa9 12345")};
  std::map<std::int64_t, std::string> pieces;
  const auto outputs =
      llm.generate(prompts, {.max_new_tokens = 12, .ignore_eos = true},
                   [&](std::int64_t r, gen::token_id, std::string_view piece) { pieces[r] += piece; });
  std::filesystem::remove_all(dir);
  const auto& tok = dynamic_cast<const sg::text::tokenizer_codec&>(*codec).text_tokenizer();
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    REQUIRE(outputs[i].error.empty());
    CHECK(outputs[i].ids.size() == 12);
    CHECK(outputs[i].prompt_tokens ==
          static_cast<std::int64_t>(tok.encode(std::get<std::string>(prompts[i])).size()));
    const std::vector<std::int32_t> ids(outputs[i].ids.begin(), outputs[i].ids.end());
    CHECK(outputs[i].text == tok.decode(ids, {.skip_special_tokens = true}));
    CHECK_FALSE(outputs[i].text.empty());
    CHECK(
        outputs[i].text.starts_with(pieces[static_cast<std::int64_t>(i)]));  // up to the last whole character
  }
}

TEST_CASE("requests go to the replica with the fewest predicted tokens", "[generate]") {
  CHECK(gen::assign_to_replicas(std::vector<std::int64_t>{10, 40, 10, 10}, 2) ==
        std::vector<int>{0, 1, 0, 0});
  CHECK(gen::assign_to_replicas(std::vector<std::int64_t>{5, 5, 5}, 3) == std::vector<int>{0, 1, 2});
  CHECK(gen::assign_to_replicas(std::vector<std::int64_t>{7, 7}, 1) == std::vector<int>{0, 0});
  CHECK_THROWS_WITH(gen::assign_to_replicas(std::vector<std::int64_t>{1}, 0),
                    ContainsSubstring("assign_to_replicas: 0 replicas"));
}

// The cache the llm sizes from config.json's attention sizes takes the bytes per block that the
// bound generation program's cache parameters take (runtime/kv_cache.hpp), tp sharding or
// replicating the 12 kv heads.
TEST_CASE("llm sizes the KV cache as the generation program holds it", "[generate]") {
  for (const int tp : {1, 2, 24}) {
    CAPTURE(tp);
    const std::string mesh = "tp=" + std::to_string(tp);
    cpu_llm llm = open_golden("llama", mesh);
    const gen::kv_cache_size& size = llm.kv_cache();
    CHECK(size.shape.local_kv_heads == (tp == 24 ? 1 : 12 / tp));
    CHECK(size.shape.head_dim == 4);
    sg::model_sizes sizes = llm.model().sizes(1, 1);
    sg::set_kv_cache_sizes(sizes, {.blocks = size.blocks, .block_tokens = 16, .max_blocks = 2});
    CHECK(sg::kv_cache_bytes_per_block(llm.model().generation, sizes,
                                       sg::mesh_shape::parse(mesh + ",dp=1,pp=1")) ==
          size.shape.bytes_per_block());
    CHECK_THAT(size.describe(), ContainsSubstring("blocks of 16 tokens"));
    // 1MiB holds far more; the pool stops at max_sequences (4) sequences of 32 positions.
    CHECK(size.blocks == 4 * 2);
  }
  // GPT-2 (12 heads of 2 over 2 layers) and a LLaMA whose head_dim is not model / heads.
  for (const std::string model : {"gpt2", "llama_tied_bias_headdim"}) {
    CAPTURE(model);
    cpu_llm llm = open_golden(model, "tp=2");
    const gen::kv_cache_size& size = llm.kv_cache();
    sg::model_sizes sizes = llm.model().sizes(1, 1);
    sg::set_kv_cache_sizes(sizes, {.blocks = size.blocks, .block_tokens = 16, .max_blocks = 2});
    CHECK(sg::kv_cache_bytes_per_block(llm.model().generation, sizes,
                                       sg::mesh_shape::parse("tp=2,dp=1,pp=1")) ==
          size.shape.bytes_per_block());
  }
}

// A device map's pipeline (llm_options::stage_layers, host_stages): stage 1 binds on the host
// backend's factory and stage 0 on the backend's, each called with its stage, and the ids are
// one rank's.
TEST_CASE("llm runs pipeline stages with their own layers and backends", "[generate][threads]") {
  std::atomic<int> backend_binds{0}, host_binds{0}, wrong_stage{0};
  gen::llm_options options{.mesh = sg::mesh_shape::parse("pp=2"),
                           .type = sg::dtype::f64,
                           .kv_memory = gen::parse_kv_memory("1MiB"),
                           .max_batched_tokens = 16,
                           .max_sequences = 4,
                           .stage_layers = {1, 1},
                           .host_stages = {false, true}};
  cpu_llm staged(
      golden + "/gpt2", options, nullptr,
      [&](int stage) {
        ++backend_binds;
        wrong_stage += stage != 0;
        return sg::cpu::backend{};
      },
      [&](int stage) {
        ++host_binds;
        wrong_stage += stage != 1;
        return sg::cpu::backend{};
      });
  const auto outputs = staged.generate(golden_prompts(), {.max_new_tokens = 8, .ignore_eos = true});
  CHECK(ids_of(outputs) ==
        ids_of(open_golden("gpt2", "tp=1").generate(golden_prompts(), {.max_new_tokens = 8, .ignore_eos = true})));
  CHECK(wrong_stage == 0);
  CHECK(host_binds > 0);
  CHECK(backend_binds > 0);

  options.host_stages = {true};
  CHECK_THROWS_WITH(cpu_llm(golden + "/gpt2", options),
                    ContainsSubstring("llm_options::host_stages: 1 flags for 2 pipeline stages"));
}
