// The memory plan: memory_plan::place puts values live at the same step apart and lets the others
// share (checked by verify and against the live-bytes lower bound on random lifetimes); and the
// executor's arena changes no result: GPT-2 and LLaMA training (f64, one rank and dp=2 x tp=2, with
// and without recomputation) give bit-identical weights and losses with memory_options{.reuse} on
// and off, while holding fewer activation bytes.
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "tiny_gpt2_training.hpp"

#include <shardgraph/plan/memory_plan.hpp>

namespace sg = shardgraph;
namespace mp = shardgraph::memory_plan;

namespace {

using namespace tiny_gpt2;

TEST_CASE("memory_plan: values live apart share bytes, values live together do not", "[runtime][memory]") {
  const std::vector<mp::value> v = {
      {.bytes = 1000, .live = {{0, 3}}}, {.bytes = 1000, .live = {{4, 9}}}, {.bytes = 500, .live = {{2, 5}}}};
  const mp::placement p = mp::place(v);
  mp::verify(v, p);
  CHECK(p.offsets[0] == p.offsets[1]);  // disjoint: the same bytes
  CHECK(p.offsets[2] >= mp::aligned(1000));
  CHECK(p.arena_bytes == mp::aligned(1000) + mp::aligned(500));
  CHECK(mp::lower_bound(v) == p.arena_bytes);

  // A second range (a recomputed value, live again later) keeps it apart from what is live then.
  const std::vector<mp::value> again = {{.bytes = 256, .live = {{0, 1}, {8, 9}}},
                                        {.bytes = 256, .live = {{9, 12}}}};
  const mp::placement q = mp::place(again);
  mp::verify(again, q);
  CHECK(q.offsets[0] != q.offsets[1]);
}

TEST_CASE("memory_plan: random lifetimes are placed apart and near the lower bound", "[runtime][memory]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<mp::value> v(40);
    for (mp::value& x : v) {
      const std::size_t first = rng() % 100;
      x.bytes = 1 + rng() % 100000;
      x.live = {{first, first + rng() % 20}};
    }
    const mp::placement p = mp::place(v);
    mp::verify(v, p);
    std::size_t sum = 0;
    for (const mp::value& x : v) sum += mp::aligned(x.bytes);
    CHECK(p.arena_bytes >= mp::lower_bound(v));
    CHECK(p.arena_bytes <= sum);
    CHECK(static_cast<double>(p.arena_bytes) < 1.5 * static_cast<double>(mp::lower_bound(v)));
  }
}

TEST_CASE("memory_plan: verify refuses overlapping values and a bad lifetime", "[runtime][memory]") {
  const std::vector<mp::value> v = {{.bytes = 512, .live = {{0, 5}}}, {.bytes = 512, .live = {{3, 7}}}};
  mp::placement same{.offsets = {0, 256}, .arena_bytes = 1024};
  CHECK_THROWS_WITH(mp::verify(v, same), Catch::Contains("live together and overlap"));
  CHECK_THROWS_WITH(mp::place({{.bytes = 8, .live = {{4, 2}}}}), Catch::Contains("before its first"));
}

constexpr sg::graph gpt2_sharded() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::graph gpt2_single() {
  return sg::models::gpt2<Mesh>({.type = sg::dtype::f64, .data_axis = "", .tensor_axis = ""});
}
constexpr sg::graph llama_single() {
  return sg::models::llama<Mesh>({.type = sg::dtype::f64, .data_axis = "", .tensor_axis = ""});
}
constexpr sg::program gpt2_plain = sg::compile<gpt2_single, sg::training{}>();
constexpr sg::program gpt2_tp = sg::compile<gpt2_sharded, sg::training{}>();
constexpr sg::program gpt2_full = sg::compile<gpt2_single, sg::training{.recompute = sg::recompute::full}>();
constexpr sg::program gpt2_attention =
    sg::compile<gpt2_single, sg::training{.recompute = sg::recompute::attention}>();
constexpr sg::program llama_plain = sg::compile<llama_single, sg::training{}>();

const sg::models::llama_config llama_tiny{
    .vocab = 64, .model = 32, .ffn = 48, .heads = 8, .kv_heads = 4, .layers = 3};

struct run {
  weights final_weights;
  std::vector<double> losses;
  std::int64_t activations = 0, arena = 0, arena_values = 0, communication = 0;
};

run train_with(const sg::program& p, const sg::model_sizes& sizes, int dp, int tp, bool reuse,
               std::vector<std::string> outputs = {}) {
  run r;
  std::mutex m;
  sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}, {"tp", tp}},
                         sg::random_weights(3, 0.3), {}, {.reuse = reuse, .outputs = outputs});
    sg::trainer t(rank, options);
    for (int s = 0; s < 3; ++s) {
      const sg::step_report report = t.step(tokens(batch, 0, s));
      if (comm.rank() == 0) r.losses.push_back(report.loss);
    }
    auto params = rank.parameters();
    std::lock_guard lock(m);
    add_slices(params, r.final_weights);
    if (comm.rank() == 0) {
      const auto mem = rank.memory();
      r.activations = mem.activations;
      r.arena = mem.arena;
      r.arena_values = mem.arena_values;
      r.communication = mem.communication;
    }
  });
  return r;
}

void check_reuse_changes_nothing(const sg::program& p, const sg::model_sizes& sizes, int dp, int tp) {
  const run apart = train_with(p, sizes, dp, tp, false), shared = train_with(p, sizes, dp, tp, true);
  CHECK(shared.losses == apart.losses);  // bit for bit: the same kernels on the same bytes
  CHECK(shared.final_weights == apart.final_weights);
  CHECK(apart.arena == 0);
  CHECK(shared.arena > 0);
  CHECK(shared.arena < shared.arena_values);  // values did share
  CHECK(shared.activations < apart.activations);
}

}  // namespace

TEST_CASE("memory plan: GPT-2 training with the arena equals training without it",
          "[runtime][memory][threads]") {
  const sg::model_sizes sizes = config.sizes(batch, seq);
  SECTION("one rank") { check_reuse_changes_nothing(gpt2_plain, sizes, 1, 1); }
  SECTION("dp=2 x tp=2") { check_reuse_changes_nothing(gpt2_tp, sizes, 2, 2); }
  SECTION("full recomputation") { check_reuse_changes_nothing(gpt2_full, sizes, 1, 1); }
  SECTION("attention recomputation") { check_reuse_changes_nothing(gpt2_attention, sizes, 1, 1); }
}

TEST_CASE("memory plan: a gradient computed on the rank is written into its param_grad, not copied",
          "[runtime][memory][threads]") {
  const sg::model_sizes sizes = config.sizes(batch, seq);
  const auto in_place = [&](const sg::program& p, int dp, bool reuse) {
    int count = -1;
    sg::threads::world(dp).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}, {"tp", 1}},
                           sg::random_weights(), {}, {.reuse = reuse});
      if (comm.rank() == 0) count = rank.memory().gradients_in_place;
    });
    return count;
  };
  int parameters = 0;
  for (int i = 0; i < gpt2_plain.nodes.size(); ++i)
    parameters += gpt2_plain.nodes[i].kind == sg::op::param_grad;
  CHECK(parameters > 10);
  CHECK(in_place(gpt2_plain, 1, true) == parameters);  // every gradient: its product or column sum writes it
  CHECK(in_place(gpt2_plain, 1, false) == 0);          // reuse off: each in its own value, then copied
  CHECK(in_place(gpt2_tp, 2, true) == 0);              // all-reduced over dp: the reduction delivers it
}

TEST_CASE("memory plan: outputs left out free their memory and change no result",
          "[runtime][memory][threads]") {
  const sg::model_sizes sizes = config.sizes(batch, seq);
  const run apart = train_with(gpt2_plain, sizes, 1, 1, false);
  const run all = train_with(gpt2_plain, sizes, 1, 1, true);
  const run loss_only = train_with(gpt2_plain, sizes, 1, 1, true, {"loss"});
  CHECK(loss_only.losses == apart.losses);
  CHECK(loss_only.final_weights == apart.final_weights);
  // The logits are no longer kept to the end, and their gradient is written over them: the arena
  // holds at least one logits-sized value less (B x T x vocab f64).
  const std::int64_t logits_bytes = batch * seq * config.vocab * 8;
  CHECK(loss_only.arena + logits_bytes <= all.arena);

  // Sharded, the logits are gathered over tp and dp for their output: left out, those gathers do not
  // run, and neither their values nor their staging are allocated. In units of the gathered logits
  // (B x T x vocab f64): the output 1, the dp gather's value and staging 2, the tp gather's 1.
  const run sharded_all = train_with(gpt2_tp, sizes, 2, 2, true);
  const run sharded_loss_only = train_with(gpt2_tp, sizes, 2, 2, true, {"loss"});
  CHECK(sharded_loss_only.losses == sharded_all.losses);
  CHECK(sharded_loss_only.final_weights == sharded_all.final_weights);
  CHECK(sharded_loss_only.activations + sharded_loss_only.communication + 4 * logits_bytes <=
        sharded_all.activations + sharded_all.communication);

  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(gpt2_plain, sizes, comm, sg::cpu::backend{}, {}, sg::random_weights(), {},
                         {.outputs = {"loss"}});
    CHECK(rank.forward(tokens(batch, 0, 0), "loss").count("loss") == 1);
    CHECK(rank.forward(tokens(batch, 0, 0)).count("logits") == 0);
    CHECK_THROWS_WITH(rank.forward(tokens(batch, 0, 0), "logits"),
                      Catch::Contains("memory_options.outputs leaves it out"));
    CHECK_THROWS_WITH(sg::bind(gpt2_plain, sizes, comm, sg::cpu::backend{}, {}, sg::random_weights(), {},
                               {.outputs = {"logit"}}),
                      Catch::Contains("'logit' is not an output of the program (its outputs: loss, logits)"));
  });
}

TEST_CASE("memory plan: LLaMA training with the arena equals training without it",
          "[runtime][memory][threads]") {
  check_reuse_changes_nothing(llama_plain, llama_tiny.sizes(batch, seq), 1, 1);
}

TEST_CASE("memory plan: a training step keeps per layer only what the backward reads", "[runtime][memory]") {
  // GPT-2 block, one rank, f64, B x T = 64 tokens of width 32: the backward reads the block's
  // input, ln_1, q/k/v by heads, the merged heads, the first residual sum and ln_2 (8 values of
  // width d) and the product before GELU and GELU's output (2 of width 4d): 16 d-wide values per
  // layer. The plain products before their bias, the bias sums that feed only the next op and the
  // attention output (the backward recomputes what it needs from q, k, v) exist once.
  sg::models::gpt2_config deep = config;
  deep.layers = 6;
  std::int64_t with_six = 0, with_two = 0;
  for (auto [layers, out] : {std::pair{6, &with_six}, std::pair{2, &with_two}}) {
    deep.layers = layers;
    sg::threads::world(1).run([&](sg::threads::communicator& comm) {
      *out = sg::bind(gpt2_plain, deep.sizes(batch, seq), comm, sg::cpu::backend{}, {}, sg::random_weights())
                 .memory()
                 .activations;
    });
  }
  const std::int64_t d_wide = batch * seq * config.model * 8;  // bytes of one (B, T, d) f64 value
  CHECK((with_six - with_two) == 4 * 16 * d_wide);
}
