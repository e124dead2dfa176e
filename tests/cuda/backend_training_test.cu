// The executor and trainer on cuda::backend equal the cpu backend (DESIGN §6): the same programs,
// weights and tokens give the same loss, gradients and trained weights.
//  - f64: GPT-2 and LLaMA (GQA) losses and gradients on one rank equal the cpu's to 1e-9 relative,
//    and so do the weights after 3 AdamW steps, on one rank and on dp=2 x tp=2 thread ranks sharing
//    the GPU (managed memory), with ZeRO 0 and 1.
//  - f32: gradients within 1e-4 relative of the cpu's f32 (different summation orders).
//  - bf16 (f32 master weights): the loss curve of 8 steps follows the cpu's bf16 run within 1e-2.
//  - A model too large for the GPU fails at bind with the value's name and the free memory.
//  - The step recorded as a CUDA graph and replayed (the default) trains as launching op by op does.
//  - Generation (f64 GPT-2 and LLaMA generation programs, run_generation over a paged cache with
//    chunked prefill and preemption): the same greedy and seeded tokens as the cpu backend.
// A GPU test (label gpu): skipped without a CUDA device.
#include <shardgraph/cpu.hpp>
#include <shardgraph/cuda/backend.hpp>
#include <shardgraph/generate/runner.hpp>
#include <shardgraph/runtime/kv_cache.hpp>
#include <shardgraph/runtime/trainer.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "catch.hpp"
#include "runtime/tiny_gpt2_training.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
using gradient_map = std::map<std::string, std::vector<double>>;

template <sg::dtype T>
constexpr sg::graph gpt2_sharded() {
  return sg::models::gpt2<Mesh>({.type = T});
}
template <sg::dtype T>
constexpr sg::graph gpt2_single() {
  return sg::models::gpt2<Mesh>({.type = T, .data_axis = "", .tensor_axis = ""});
}
constexpr sg::graph llama_single() {
  return sg::models::llama<Mesh>({.type = sg::dtype::f64, .data_axis = "", .tensor_axis = ""});
}
constexpr sg::graph llama_sharded() { return sg::models::llama<Mesh>({.type = sg::dtype::f64}); }

constexpr sg::program gpt2_f64 = sg::compile<gpt2_single<sg::dtype::f64>, sg::training{}>();
constexpr sg::program gpt2_f64_sharded = sg::compile<gpt2_sharded<sg::dtype::f64>, sg::training{}>();
constexpr sg::program gpt2_f64_zero1 =
    sg::compile<gpt2_sharded<sg::dtype::f64>, sg::training{.zero_stage = 1}>();
constexpr sg::program gpt2_f32 = sg::compile<gpt2_single<sg::dtype::f32>, sg::training{}>();
constexpr sg::program gpt2_bf16 = sg::compile<gpt2_single<sg::dtype::bf16>, sg::training{}>();
constexpr sg::program llama_f64 = sg::compile<llama_single, sg::training{}>();
constexpr sg::program llama_f64_sharded = sg::compile<llama_sharded, sg::training{}>();

constexpr sg::program gpt2_generation = sg::compile<gpt2_single<sg::dtype::f64>, sg::inference{.kv_cache = true}>();
constexpr sg::program llama_generation = sg::compile<llama_single, sg::inference{.kv_cache = true}>();

constexpr std::int64_t batch = 4, seq = 8;
const sg::models::gpt2_config gpt2_tiny{.vocab = 64, .positions = 16, .model = 32, .heads = 4, .layers = 2};
const sg::models::llama_config llama_tiny{
    .vocab = 64, .model = 32, .ffn = 48, .heads = 8, .kv_heads = 4, .layers = 2};

auto cpu_backend = [] { return sg::cpu::backend{}; };
auto gpu_backend = [] { return sg::cuda::backend{}; };
auto shared_gpu_backend = [] { return sg::cuda::backend{{.host_visible = true}}; };

sg::tensor_map token_inputs() {
  std::vector<std::int64_t> ids(batch * seq), targets(batch * seq);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>((i * 37 + 11) % 64);
    targets[i] = static_cast<std::int64_t>((i * 53 + 7) % 64);
  }
  sg::tensor_map m;
  m.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, targets));
  return m;
}

// Whole gradients and the loss of one forward + backward on dp x tp thread ranks.
template <class MakeBackend>
gradient_map gradients(MakeBackend make_backend, const sg::program& p, const sg::model_sizes& sizes, int dp,
                       int tp, double* loss) {
  gradient_map whole;
  std::mutex m;
  sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, sizes, comm, make_backend(), sg::mesh_shape{{"dp", dp}, {"tp", tp}},
                         sg::random_weights(5, 0.3));
    auto out = rank.forward(token_inputs());
    auto grads = rank.gradients();
    std::lock_guard lock(m);
    if (comm.rank() == 0) *loss = out.at("loss").at(0);
    for (auto& [name, g] : grads) {
      std::vector<double>& dst = whole[name];
      std::int64_t n = 1;
      for (auto v : g.slice.global) n *= v;
      dst.resize(static_cast<std::size_t>(n));
      sg::for_each_in_slice(g.slice, [&](std::int64_t global, std::int64_t local) {
        dst[static_cast<std::size_t>(global)] = g.values.at(local);
      });
    }
  });
  return whole;
}

// Every gradient within `relative` of the reference's largest magnitude (plus a floor for the
// gradients that are zero in exact arithmetic, such as attention's key bias).
void check_gradients(const gradient_map& got, const gradient_map& want, double relative, double floor) {
  REQUIRE(got.size() == want.size());
  for (auto& [name, w] : want) {
    CAPTURE(name);
    const std::vector<double>& g = got.at(name);
    REQUIRE(g.size() == w.size());
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      diff = std::max(diff, std::abs(g[i] - w[i]));
      scale = std::max(scale, std::abs(w[i]));
    }
    CHECK(diff <= relative * scale + floor);
  }
}

std::vector<double> losses(const std::vector<sg::step_report>& reports) {
  std::vector<double> l;
  for (const auto& r : reports) l.push_back(r.loss);
  return l;
}

}  // namespace

TEST_CASE("cuda backend: f64 GPT-2 and LLaMA losses and gradients equal the cpu backend's", "[cuda][gpu]") {
  for (const bool llama : {false, true}) {
    CAPTURE(llama);
    const sg::program& single = llama ? llama_f64 : gpt2_f64;
    const sg::program& sharded = llama ? llama_f64_sharded : gpt2_f64_sharded;
    const sg::model_sizes sizes = llama ? llama_tiny.sizes(batch, seq) : gpt2_tiny.sizes(batch, seq);
    double want_loss = 0, loss = 0;
    const gradient_map want = gradients(cpu_backend, single, sizes, 1, 1, &want_loss);
    const gradient_map got = gradients(gpu_backend, single, sizes, 1, 1, &loss);
    CHECK(std::abs(loss - want_loss) < 1e-12 * want_loss);
    check_gradients(got, want, 1e-9, 1e-14);
    SECTION("dp=2 x tp=2 thread ranks on one GPU") {
      const gradient_map shared = gradients(shared_gpu_backend, sharded, sizes, 2, 2, &loss);
      CHECK(std::abs(loss - want_loss) < 1e-12 * want_loss);
      check_gradients(shared, want, 1e-9, 1e-14);
    }
  }
}

TEST_CASE("cuda backend: f64 weights after 3 AdamW steps equal the cpu backend's", "[cuda][gpu]") {
  using namespace tiny_gpt2;
  std::vector<sg::step_report> want_reports, got_reports;
  const weights want = train(gpt2_f64, 1, 1, 3, 1, &want_reports);
  const weights got = train_on(gpu_backend, gpt2_f64, 1, 1, 3, 1, &got_reports);
  CHECK(max_relative_difference(got, want) < 1e-9);
  REQUIRE(got_reports.size() == 3);
  for (std::size_t s = 0; s < 3; ++s) {
    CHECK(std::abs(got_reports[s].loss - want_reports[s].loss) < 1e-11 * want_reports[s].loss);
    CHECK(std::abs(got_reports[s].grad_norm - want_reports[s].grad_norm) < 1e-9 * want_reports[s].grad_norm);
  }
  for (const sg::program* p : {&gpt2_f64_sharded, &gpt2_f64_zero1}) {
    CAPTURE(p->zero_stage);
    CHECK(max_relative_difference(train_on(shared_gpu_backend, *p, 2, 2, 3, 1, nullptr), want) < 1e-9);
  }
}

TEST_CASE("cuda backend: f32 gradients are within 1e-4 of the cpu backend's", "[cuda][gpu]") {
  double want_loss = 0, loss = 0;
  const gradient_map want = gradients(cpu_backend, gpt2_f32, gpt2_tiny.sizes(batch, seq), 1, 1, &want_loss);
  const gradient_map got = gradients(gpu_backend, gpt2_f32, gpt2_tiny.sizes(batch, seq), 1, 1, &loss);
  CHECK(std::abs(loss - want_loss) < 1e-5 * want_loss);
  check_gradients(got, want, 1e-4, 1e-7);
}

TEST_CASE("cuda backend: bf16 training follows the cpu backend's bf16 loss curve", "[cuda][gpu]") {
  using namespace tiny_gpt2;
  std::vector<sg::step_report> want, got;
  train(gpt2_bf16, 1, 1, 8, 1, &want);
  train_on(gpu_backend, gpt2_bf16, 1, 1, 8, 1, &got);
  const std::vector<double> want_losses = losses(want), got_losses = losses(got);
  REQUIRE(got_losses.size() == 8);
  CHECK(got_losses.back() < got_losses.front());  // it trains
  for (std::size_t s = 0; s < want_losses.size(); ++s) {
    CAPTURE(s, got_losses[s], want_losses[s]);
    CHECK(std::abs(got_losses[s] - want_losses[s]) < 1e-2 * want_losses[s]);
  }
}

TEST_CASE("cuda backend: a model that does not fit fails at bind, naming the value", "[cuda][gpu]") {
  // GPT-2 124M's logits alone for 2^16 sequences of 1024 tokens: 2^26 x 50304 bf16, about 6.4 TiB.
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    const std::string message = sg::testing::error_of([&] {
      auto rank =
          sg::bind(gpt2_bf16, sg::models::gpt2_config::small().sizes(std::int64_t{1} << 16, 1024), comm,
                   gpu_backend(), sg::mesh_shape{{"dp", 1}, {"tp", 1}}, sg::random_weights(1, 0.02));
      static_cast<void>(rank);
    });
    CHECK_THAT(message, sg::testing::ContainsSubstring("bind: memory (rank 0)"));
    CHECK_THAT(message, sg::testing::ContainsSubstring("available (what the backend reports free)"));
    CHECK_THAT(message, sg::testing::ContainsSubstring("is the first value that does not fit"));
  });
  // The GPU is usable afterwards.
  double loss = 0;
  gradients(gpu_backend, gpt2_f64, gpt2_tiny.sizes(batch, seq), 1, 1, &loss);
  CHECK(std::isfinite(loss));
}

TEST_CASE("cuda backend: profile mode times every op it runs", "[cuda][gpu]") {
  sg::cuda::backend profiled({.profile = true});
  REQUIRE(profiled.profiling());
  double loss = 0;
  gradients([&] { return profiled; }, gpt2_f64, gpt2_tiny.sizes(batch, seq), 1, 1, &loss);  // copies share state
  const std::vector<sg::cuda::op_time> times = profiled.profile();
  REQUIRE(!times.empty());
  bool linear = false, attention_gradient = false;
  for (std::size_t i = 0; i < times.size(); ++i) {
    CHECK(times[i].calls > 0);
    if (i > 0) CHECK(times[i].ms <= times[i - 1].ms);  // largest first
    linear = linear || times[i].name == "linear f64";
    attention_gradient = attention_gradient || times[i].name == "attention_grad_q f64";
  }
  CHECK(linear);
  CHECK(attention_gradient);
  profiled.reset_profile();
  CHECK(profiled.profile().empty());
  CHECK(!sg::cuda::backend{}.profiling());
}

namespace {

// One rank's bf16 training, 6 steps of 2 micro-batches: the losses, the weights, and how many
// forward() runs replayed a recording. With `ignoring`, step s >= 3 sets its micro-batches' first s
// targets to -100: the step's count of targets, which a recording bakes in, changes every step.
struct recorded_training {
  std::vector<double> losses;
  tiny_gpt2::weights weights;
  int replays = 0, recordings = 0;
};
recorded_training train_recorded(bool graphs, bool ignoring = false) {
  using namespace tiny_gpt2;
  recorded_training out;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(gpt2_bf16, config.sizes(batch / 2, seq), comm, sg::cuda::backend({.graphs = graphs}),
                         sg::mesh_shape{{"dp", 1}, {"tp", 1}}, sg::random_weights(3, 0.3));
    sg::trainer t(rank, options);
    for (int s = 0; s < 6; ++s) {
      std::vector<sg::tensor_map> parts{tokens(batch / 2, 0, s), tokens(batch / 2, batch / 2, s)};
      if (ignoring && s >= 3)
        for (sg::tensor_map& part : parts)
          for (int k = 0; k < s; ++k) part.at("targets").values<std::int64_t>()[static_cast<std::size_t>(k)] = -100;
      out.losses.push_back(t.step(parts).loss);
    }
    add_slices(rank.parameters(), out.weights);
    out.replays = rank.replayed_runs();
    out.recordings = rank.recordings();
  });
  return out;
}

}  // namespace

TEST_CASE("cuda backend: the step recorded as one CUDA graph trains as op by op does", "[cuda][gpu]") {
  const recorded_training replayed = train_recorded(true), launched = train_recorded(false);
  // 12 runs: the first op by op, the second recorded, and from it on every one replayed
  CHECK(replayed.recordings == 1);
  CHECK(replayed.replays == 11);
  CHECK(launched.replays == 0);
  REQUIRE(replayed.losses.size() == launched.losses.size());
  for (std::size_t s = 0; s < launched.losses.size(); ++s) {
    CAPTURE(s, replayed.losses[s], launched.losses[s]);
    CHECK(std::abs(replayed.losses[s] - launched.losses[s]) <= 1e-6 * launched.losses[s]);
  }
  CHECK(launched.losses.back() < launched.losses.front());  // it trains, on fresh tokens every step
  CHECK(tiny_gpt2::max_relative_difference(replayed.weights, launched.weights) < 1e-6);
  // profile mode times each op apart: nothing is recorded
  sg::cuda::backend profiled({.profile = true});
  CHECK(!profiled.records());
  CHECK(sg::cuda::backend{}.records());
  CHECK(!sg::cuda::backend({.graphs = false}).records());
}

TEST_CASE("cuda backend: a step whose count of targets changes records anew and trains as op by op does",
          "[cuda][gpu]") {
  const recorded_training replayed = train_recorded(true, true), launched = train_recorded(false, true);
  // steps 3, 4, 5: the first run finds the recording stale (op by op), the second records
  CHECK(replayed.recordings == 4);
  REQUIRE(replayed.losses.size() == launched.losses.size());
  for (std::size_t s = 0; s < launched.losses.size(); ++s) {
    CAPTURE(s, replayed.losses[s], launched.losses[s]);
    CHECK(std::abs(replayed.losses[s] - launched.losses[s]) <= 1e-6 * launched.losses[s]);
  }
  CHECK(tiny_gpt2::max_relative_difference(replayed.weights, launched.weights) < 1e-6);
}

namespace {

// Requests of different lengths, greedy and seeded, over a pool of 6 blocks of 4 tokens, with at
// most 8 tokens a step: prompts are cut in chunks and sequences preempted, as on the cpu backend.
std::vector<sg::generate::generation_request> generation_requests() {
  const std::vector<std::vector<std::int64_t>> prompts{
      {4, 9, 33}, {60, 1, 8, 8, 30, 12, 7, 5, 44}, {17, 2}, {3, 3, 50, 21, 9, 10}};
  std::vector<sg::generate::generation_request> requests;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    sg::generate::generation_request r{.prompt = prompts[i], .max_new_tokens = 5};
    if (i % 2 == 1) r.sampling = {.temperature = 0.9, .top_p = 0.9, .seed = 11 + i};
    requests.push_back(r);
  }
  return requests;
}

template <class MakeBackend, class Config>
std::vector<std::vector<std::int64_t>> generated_tokens(MakeBackend make_backend, const sg::program& generation,
                                                        const Config& config) {
  const sg::generate::kv_cache_size size{
      .shape = {.layers = config.layers, .local_kv_heads = 4, .head_dim = 8, .dtype_bytes = 8,
                .max_positions = 16, .block_tokens = 4},
      .blocks = 6};
  const sg::kv_cache_shape cache{.blocks = size.blocks, .block_tokens = 4, .max_blocks = 4};
  std::vector<std::vector<std::int64_t>> tokens;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    sg::generate::scheduler s(size, {.vocab_size = config.vocab, .max_batched_tokens = 8, .max_sequences = 4});
    for (const auto& r : generation_requests()) s.submit(r);
    auto bind_rank = [&](std::int64_t rows, std::int64_t tokens_per_row, const auto& parameters) {
      sg::model_sizes sizes = config.sizes(rows, tokens_per_row);
      return sg::bind(generation, sg::set_kv_cache_sizes(sizes, cache), comm, make_backend(),
                      sg::mesh_shape{{"dp", 1}, {"tp", 1}}, parameters);
    };
    const auto results =
        sg::generate::run_generation(s, bind_rank, sg::random_weights(5, 0.3), {.max_blocks = cache.max_blocks});
    CHECK(s.preemption_count() > 0);
    for (const auto& r : results) {
      CHECK(r.reason == sg::generate::finish_reason::max_new_tokens);
      tokens.push_back(r.generated);
    }
  });
  return tokens;
}

}  // namespace

TEST_CASE("cuda backend: generation gives the cpu backend's greedy and seeded tokens", "[cuda][gpu]") {
  SECTION("GPT-2") {
    const auto want = generated_tokens(cpu_backend, gpt2_generation, gpt2_tiny);
    CHECK(generated_tokens(gpu_backend, gpt2_generation, gpt2_tiny) == want);
  }
  SECTION("LLaMA, grouped-query") {
    const auto want = generated_tokens(cpu_backend, llama_generation, llama_tiny);
    CHECK(generated_tokens(gpu_backend, llama_generation, llama_tiny) == want);
  }
}
