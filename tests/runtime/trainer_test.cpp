// The trainer on thread ranks: after 3 AdamW steps (with clipping) every weight of every dp x tp
// layout, ZeRO stage (0 to 3), gradient bucket size and recompute setting equals the one-rank run
// (f64, relative 1e-9);
// gradient accumulation over micro-batches equals one large batch; buckets reduced (ZeRO-2, 3:
// reduce-scattered) and ZeRO-3 layers gathered on communication threads equal the same in place,
// bit for bit; bias gradients written by
// their weight products equal separate column sums, and GELU, its gradient and adds done in the
// epilogues of products and norm gradients equal the separate steps; a one-rank step's copies and optimizer
// calls are counted; a program without backward is refused; a NaN is reported at its step and op.
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "catch.hpp"
#include "support/cpu_fused_calls.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "tiny_gpt2_training.hpp"

namespace sg = shardgraph;

namespace {

using namespace tiny_gpt2;

constexpr sg::graph gpt2_sharded() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::graph gpt2_single() {
  return sg::models::gpt2<Mesh>({.type = sg::dtype::f64, .data_axis = "", .tensor_axis = ""});
}
constexpr sg::program sharded = sg::compile<gpt2_sharded, sg::training{}>();
constexpr sg::program single = sg::compile<gpt2_single, sg::training{}>();
constexpr sg::program zero1 = sg::compile<gpt2_sharded, sg::training{.zero_stage = 1}>();
constexpr sg::program zero2 = sg::compile<gpt2_sharded, sg::training{.zero_stage = 2}>();
constexpr sg::program zero3 = sg::compile<gpt2_sharded, sg::training{.zero_stage = 3}>();
constexpr sg::program recompute_full =
    sg::compile<gpt2_sharded,
                sg::training{.zero_stage = 0, .zero_axis = "dp", .recompute = sg::recompute::full}>();
constexpr sg::program recompute_attention =
    sg::compile<gpt2_sharded,
                sg::training{.zero_stage = 2, .zero_axis = "dp", .recompute = sg::recompute::attention}>();

// ZeRO-2 leaves every parameter gradient Partial on dp (the trainer reduce-scatters it): the only
// dp all_reduce left is the loss's. Plain data parallelism all-reduces all 20 gradients.
static_assert(zero2.count(sg::op::all_reduce, "dp") == 1);
static_assert(sharded.count(sg::op::all_reduce, "dp") == 21);
static_assert(zero1.count(sg::op::all_reduce, "dp") == 21);
static_assert(zero3.count(sg::op::all_reduce, "dp") == 1 && zero3.zero_stage == 3);

// What rank 0 of a dp-rank run holds after one step: the program's memory and the trainer's.
struct step_memory {
  sg::rank_program<sg::cpu::backend, sg::threads::communicator>::memory_report program;
  sg::optimizer_memory optimizer;
};
step_memory memory_after_one_step(const sg::program& p, int dp) {
  step_memory m;
  sg::threads::world(dp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, config.sizes(batch, seq), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}},
                         sg::random_weights());
    sg::trainer t(rank, options);
    t.step(tokens(batch, 0, 0));
    if (comm.rank() == 0) m = {rank.memory(), t.memory()};
  });
  return m;
}

}  // namespace

TEST_CASE("trainer: after 3 AdamW steps every dp x tp layout's weights equal one rank",
          "[runtime][training][threads]") {
  std::vector<sg::step_report> reference_reports;
  const weights initial = train(single, 1, 1, 0, 1, nullptr);
  const weights reference = train(single, 1, 1, 3, 1, &reference_reports);
  REQUIRE(reference_reports.size() == 3);
  CHECK(reference_reports[0].grad_norm > options.max_grad_norm);  // clipping is exercised
  CHECK(max_relative_difference(reference, initial) > 1e-3);      // the weights moved
  for (int dp : {1, 2, 4})
    for (int tp : {1, 2}) {
      CAPTURE(dp, tp);
      std::vector<sg::step_report> reports;
      weights got = train(sharded, dp, tp, 3, 1, &reports);
      CHECK(max_relative_difference(got, reference) < 1e-9);
      for (std::size_t s = 0; s < reports.size(); ++s) {
        CHECK(std::abs(reports[s].loss - reference_reports[s].loss) < 1e-12 * reference_reports[s].loss);
        CHECK(std::abs(reports[s].grad_norm - reference_reports[s].grad_norm) <
              1e-9 * reference_reports[s].grad_norm);
      }
    }
}

TEST_CASE("trainer: every dp x tp x ZeRO stage x recompute setting equals one rank after 3 steps",
          "[runtime][training][threads]") {
  const weights reference = train(single, 1, 1, 3, 1, nullptr);
  for (const sg::program* compiled : {&sharded, &zero1, &zero2, &zero3})
    for (sg::recompute mode : {sg::recompute::none, sg::recompute::full})
      for (int dp : {1, 2, 4})
        for (int tp : {1, 2}) {
          auto p = std::make_unique<sg::program>(*compiled);  // recomputation is chosen per run
          p->recompute = mode;
          CAPTURE(p->zero_stage, static_cast<int>(mode), dp, tp);
          CHECK(max_relative_difference(train(*p, dp, tp, 3, 1, nullptr), reference) < 1e-9);
        }
  // Micro-batches under ZeRO-2 and 3 accumulate reduce-scattered chunks.
  CHECK(max_relative_difference(train(zero2, 2, 2, 3, 2, nullptr), reference) < 1e-9);
  CHECK(max_relative_difference(train(zero3, 2, 2, 3, 2, nullptr), reference) < 1e-9);
  CHECK(max_relative_difference(train(zero3, 4, 1, 3, 2, nullptr), reference) < 1e-9);
}

TEST_CASE("trainer: gradient buckets of any size train like one rank; they follow bucket_bytes",
          "[runtime][training][threads]") {
  const weights reference = train(single, 1, 1, 3, 1, nullptr);
  auto buckets_of = [](const sg::program& p, int dp) {
    std::vector<sg::rank_program<sg::cpu::backend, sg::threads::communicator>::bucket_report> r;
    sg::threads::world(dp).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(p, config.sizes(batch, seq), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}},
                           sg::random_weights());
      if (comm.rank() == 0) r = rank.gradient_buckets();
    });
    return r;
  };
  // The tiny GPT-2 has 36 parameter gradients (2 layers of 16, plus 4 outside the block), all
  // reduced on dp: by default (25 MiB) one bucket holds them all.
  REQUIRE(buckets_of(sharded, 2).size() == 1);
  CHECK(buckets_of(sharded, 2)[0].gradients == 36);
  CHECK(buckets_of(sharded, 1).empty());  // one rank on dp: nothing to reduce
  // ZeRO-2 and 3 reduce-scatter the same 36 gradients: a bucket sends every rank's chunk of each,
  // so it is larger than the gradients by at most the padding of each to a multiple of dp.
  for (const sg::program* zero : {&zero2, &zero3}) {
    CAPTURE(zero->zero_stage);
    const auto scattered = buckets_of(*zero, 4), reduced = buckets_of(sharded, 4);
    REQUIRE(scattered.size() == 1);
    CHECK(scattered[0].reduce_scatter);
    CHECK_FALSE(reduced[0].reduce_scatter);
    CHECK(scattered[0].gradients == 36);
    CHECK(scattered[0].bytes >= reduced[0].bytes);
    CHECK(scattered[0].bytes < reduced[0].bytes + 36 * 4 * 8);
  }
  for (std::int64_t bytes : {std::int64_t{0}, std::int64_t{4096}, std::int64_t{40000}}) {
    auto p = std::make_unique<sg::program>(sharded);
    p->bucket_bytes = bytes;
    CAPTURE(bytes);
    const auto buckets = buckets_of(*p, 2);
    if (bytes == 0) CHECK(buckets.empty());
    int gradients = 0;
    for (const auto& b : buckets) {
      gradients += b.gradients;
      CHECK((b.bytes <= bytes || b.gradients == 1));  // a gradient larger than a bucket goes alone
    }
    if (bytes > 0) CHECK(gradients == 36);
    if (bytes == 4096) CHECK(buckets.size() > 4);
    for (auto [dp, tp] : {std::pair{2, 1}, {4, 2}}) {
      CAPTURE(dp, tp);
      CHECK(max_relative_difference(train(*p, dp, tp, 3, 1, nullptr), reference) < 1e-9);
    }
  }
}

TEST_CASE("trainer: buckets and ZeRO-3 gathers on communication threads train bit for bit as in place",
          "[runtime][training][threads]") {
  // What rank 0 reports of a dp x tp binding of p.
  struct bound {
    bool overlaps = false;
    std::int64_t communication = 0;
  };
  auto bound_of = [](const sg::program& p, int dp, int tp) {
    bound r;
    sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(p, config.sizes(batch, seq), comm, sg::cpu::backend{},
                           sg::mesh_shape{{"dp", dp}, {"tp", tp}}, sg::random_weights());
      if (comm.rank() == 0) r = {rank.overlaps_communication(), rank.memory().communication};
    });
    return r;
  };
  // The same weights and losses after 3 steps of 2 micro-batches, overlapped or not.
  auto same_training = [](const sg::program& overlapped, const sg::program& in_place) {
    for (auto [dp, tp] : {std::pair{2, 1}, {2, 2}, {4, 1}}) {
      CAPTURE(dp, tp);
      std::vector<sg::step_report> a, b;
      const weights with = train(overlapped, dp, tp, 3, 2, &a), without = train(in_place, dp, tp, 3, 2, &b);
      CHECK(max_relative_difference(with, without) == 0);  // the same sums in the same order
      REQUIRE(a.size() == b.size());
      for (std::size_t s = 0; s < a.size(); ++s) CHECK(a[s].loss == b[s].loss);
    }
  };
  for (std::int64_t bytes : {std::int64_t{0}, std::int64_t{4096}, std::int64_t{25} << 20}) {
    auto overlapped = std::make_unique<sg::program>(sharded),
         in_place = std::make_unique<sg::program>(sharded);
    overlapped->bucket_bytes = in_place->bucket_bytes = bytes;
    in_place->overlap_communication = false;
    CAPTURE(bytes);
    CHECK(overlapped->overlap_communication);  // training{}'s default
    CHECK(bound_of(*overlapped, 2, 2).overlaps == (bytes > 0));
    CHECK_FALSE(bound_of(*in_place, 2, 2).overlaps);
    CHECK_FALSE(bound_of(*overlapped, 1, 1).overlaps);  // one rank: nothing to reduce
    // Two staging buffers take turns where buckets of several gradients follow each other.
    if (bytes == 4096)
      CHECK(bound_of(*overlapped, 2, 1).communication > bound_of(*in_place, 2, 1).communication);
    same_training(*overlapped, *in_place);
  }
  // ZeRO-3: the next layer's weights are gathered while this layer computes.
  auto gathered_in_place = std::make_unique<sg::program>(zero3);
  gathered_in_place->overlap_communication = false;
  CHECK(bound_of(zero3, 2, 1).overlaps);
  CHECK_FALSE(bound_of(*gathered_in_place, 2, 1).overlaps);
  same_training(zero3, *gathered_in_place);
  // ZeRO-2 and 3: the gradients reduce-scattered in buckets during backward, on the communication
  // thread or not, in buckets of one size or another, equal the trainer's own reduce-scatter of
  // each gradient after backward (no buckets). At tp = 2 the tensor-parallel all_reduce buckets
  // write the norms' gradients, which are then left to the trainer.
  for (const sg::program* zero : {&zero2, &zero3}) {
    CAPTURE(zero->zero_stage);
    auto scattered_in_place = std::make_unique<sg::program>(*zero),
         after_backward = std::make_unique<sg::program>(*zero), small = std::make_unique<sg::program>(*zero);
    scattered_in_place->overlap_communication = false;
    after_backward->bucket_bytes = 0;
    small->bucket_bytes = 4096;
    CHECK(bound_of(*zero, 2, 1).overlaps);
    same_training(*zero, *scattered_in_place);
    same_training(*zero, *after_backward);
    same_training(*small, *after_backward);
  }
  auto zero2_unbucketed = std::make_unique<sg::program>(zero2);
  zero2_unbucketed->bucket_bytes = 0;
  CHECK_FALSE(bound_of(*zero2_unbucketed, 2, 1).overlaps);
}

TEST_CASE("trainer: ZeRO-3 keeps 1/D of the parameters, plus two gathered layers",
          "[runtime][training][threads]") {
  auto memory_of = [](const sg::program& p, int dp) { return memory_after_one_step(p, dp).program; };
  const auto plain = memory_of(sharded, 4), stage3 = memory_of(zero3, 4);
  CHECK(plain.gathered_parameters == 0);
  // 36 chunks round up by fewer than 4 elements of 8 bytes each.
  CHECK(stage3.parameters * 4 >= plain.parameters);
  CHECK(stage3.parameters * 4 <= plain.parameters + 36 * 4 * 8 * 4);
  // Gathered: the block's weights for 2 layers (all of them, as the tiny model has 2 layers) and
  // the 4 weights outside the block, each padded to a multiple of 4 elements.
  CHECK(stage3.gathered_parameters >= plain.parameters);
  CHECK(stage3.gathered_parameters <= plain.parameters + 36 * 4 * 8);
}

TEST_CASE("trainer: ZeRO shards optimizer states (stage 1) and gradient sums (stage 2) over dp",
          "[runtime][training][threads]") {
  auto memory_of = [](const sg::program& p, int dp) { return memory_after_one_step(p, dp).optimizer; };
  const sg::optimizer_memory plain = memory_of(sharded, 4), stage1 = memory_of(zero1, 4),
                             stage2 = memory_of(zero2, 4);
  CHECK(plain.optimizer_states > 0);
  // Each of the 36 slices rounds its chunk up by fewer than 4 elements of 8 bytes, twice (m and v).
  CHECK(stage1.optimizer_states * 4 <= plain.optimizer_states + 36 * 2 * 4 * 8 * 4);
  CHECK(stage1.optimizer_states * 4 >= plain.optimizer_states);
  // Without ZeRO a step of one micro-batch keeps no gradient sum: AdamW reads the gradients.
  CHECK(plain.gradient_sums == 0);
  const std::int64_t whole_sums = plain.optimizer_states / 2;  // m alone: one f64 per element
  CHECK(stage1.gradient_sums == whole_sums);
  CHECK(stage2.gradient_sums * 4 >= whole_sums);
  CHECK(stage2.gradient_sums * 4 <= whole_sums + 36 * 4 * 8 * 4);
}

TEST_CASE("trainer: ZeRO-2 and 3 keep 1/D of the gradients; their whole buffers are reused",
          "[runtime][training][threads]") {
  // Each gradient is reduce-scattered in a bucket as soon as backward writes it, so the rank keeps
  // only its chunk of each (a layer's whole gradient shares the arena with the activations).
  const auto plain = memory_after_one_step(sharded, 4).program;
  for (const sg::program* zero : {&zero2, &zero3}) {
    CAPTURE(zero->zero_stage);
    const auto scattered = memory_after_one_step(*zero, 4).program;
    CHECK(scattered.gradients * 4 >= plain.gradients);
    CHECK(scattered.gradients * 4 <= plain.gradients + 36 * 4 * 8 * 4);  // chunks padded to 4 elements
    auto unbucketed = std::make_unique<sg::program>(*zero);
    unbucketed->bucket_bytes = 0;  // then the trainer reduce-scatters each whole gradient after backward
    CHECK(memory_after_one_step(*unbucketed, 4).program.gradients == plain.gradients);
  }
  // The whole gradients are gone, and gradients() says so instead of returning reused memory.
  std::string refusal;
  sg::threads::world(2).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(zero2, config.sizes(batch, seq), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", 2}},
                         sg::random_weights());
    rank.forward(tokens(batch, 0, 0));
    const std::string message = sg::testing::error_of([&] { rank.gradients(); });
    if (comm.rank() == 0) refusal = message;
  });
  CHECK_THAT(refusal, sg::testing::ContainsSubstring("training{.bucket_bytes = 0}"));
}

TEST_CASE("trainer: activation recomputation (full, attention) trains like one rank and keeps less",
          "[runtime][training][threads]") {
  const weights reference = train(single, 1, 1, 3, 1, nullptr);
  for (const sg::program* p : {&recompute_full, &recompute_attention})
    for (auto [dp, tp] : {std::pair{1, 1}, {2, 2}}) {
      CAPTURE(static_cast<int>(p->recompute), dp, tp);
      CHECK(max_relative_difference(train(*p, dp, tp, 3, 1, nullptr), reference) < 1e-9);
    }
  // Eight layers: only the activations the backward reads are kept per layer, and full
  // recomputation holds one layer's values at a time, so it keeps less than attention-only
  // recomputation once the model has more than a couple of layers.
  sg::models::gpt2_config deep = config;
  deep.layers = 8;
  auto activations = [&](const sg::program& p) {
    std::int64_t bytes = 0;
    sg::threads::world(1).run([&](sg::threads::communicator& comm) {
      bytes = sg::bind(p, deep.sizes(batch, seq), comm, sg::cpu::backend{}, {}, sg::random_weights())
                  .memory()
                  .activations;
    });
    return bytes;
  };
  const std::int64_t kept = activations(sharded), full = activations(recompute_full),
                     attention = activations(recompute_attention);
  CHECK(full < attention);
  CHECK(attention < kept);
}

// A weight product's or a layer norm's bias gradient, written by the weight gradient's call
// (fused::weight_grad_with_bias, as a GPU's GEMM epilogue takes it; norm_weight_grad_with_bias, as
// a GPU's column sums take it) and lowered onto the cpu's kernels, or run as the bias_grad step: the
// same bytes either way.
const sg::memory_options without_bias_grad_epilogue{
    .fusion = sg::compute::fused_set::all().without(
        {sg::compute::fused::weight_grad_with_bias, sg::compute::fused::norm_weight_grad_with_bias})};

TEST_CASE("trainer: bias gradients written with their weight gradients train exactly as apart",
          "[runtime][training][threads]") {
  for (auto [p, dp, tp] : {std::tuple{&sharded, 1, 1}, {&sharded, 2, 2}, {&single, 2, 1}}) {
    CAPTURE(p == &single, dp, tp);
    const weights fused = train_on([] { return sg::cpu::backend{}; }, *p, dp, tp, 2, 1, nullptr);
    const weights apart =
        train_on([] { return sg::cpu::backend{}; }, *p, dp, tp, 2, 1, nullptr, options, without_bias_grad_epilogue);
    CHECK(fused == apart);
  }
  // Every bias gradient whose dy a weight product or a layer norm's weight gradient also reads is
  // paired with it: per block the q, k, v, attention output, MLP in and MLP out linears, and
  // without tensor parallelism the two layer norms and the final one. With it, a norm's bias
  // gradient sums the partial dy before its all-reduce, its weight gradient the reduced one.
  struct pairs {
    int linears = 0, norms = 0;
  };
  const auto pairs_in = [](const sg::program& p) {
    pairs found;
    const sg::graph& g = p.nodes;
    for (int j = 0; j < g.size(); ++j) {
      if (g[j].kind != sg::op::bias_grad) continue;
      bool product = false, norm = false;
      for (int k = 0; k < g.size(); ++k) {
        product = product || (g[k].kind == sg::op::linear_weight_grad && g[k].inputs[1] == g[j].inputs[0]);
        norm = norm || (g[k].kind == sg::op::layer_norm_grad_w && g[k].inputs[1] == g[j].inputs[0]);
      }
      found.linears += product;
      found.norms += norm;
    }
    return found;
  };
  const pairs in_sharded = pairs_in(sharded), in_single = pairs_in(single);
  CHECK(in_sharded.linears == 6);
  CHECK(in_sharded.norms == 0);
  CHECK(in_single.linears == 6);
  CHECK(in_single.norms == 3);
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    for (const auto& [p, want] : {std::pair{&sharded, in_sharded}, {&single, in_single}}) {
      auto paired =
          sg::bind(*p, config.sizes(batch, seq), comm, sg::cpu::backend{}, {}, sg::random_weights());
      auto apart = sg::bind(*p, config.sizes(batch, seq), comm, sg::cpu::backend{}, {}, sg::random_weights(),
                            {}, without_bias_grad_epilogue);
      CHECK(paired.bias_gradients_with_weights() == want.linears + want.norms);
      CHECK(apart.bias_gradients_with_weights() == 0);
    }
  });
}

// A plan of fused calls, each lowered into the steps it stands for (compute/lower_fused.hpp), and
// the plan with every step a call of its own: the same bytes.
const sg::memory_options every_step_apart{.fusion = {}};

// The cpu backend declaring no fused kind at all (not even a linear's bias, which the cpu's kernel
// takes): the core lowers every one.
struct cpu_running_no_fused_kind : sg::cpu::backend {
  struct traits {
    static constexpr sg::compute::fused_set runs{};
  };
};

TEST_CASE(
    "trainer: GELU, its gradient and the adds after products, norm gradients and the tied table's "
    "gradient, done in their epilogues, attention on the products' layout, its three gradients in one call, "
    "a norm's three in one call, the loss with the logits' gradient and q's, k's and v's products batched "
    "train exactly as apart",
    "[runtime][training][threads]") {
  // The values a product's epilogue writes are live from the product's step, and so are q, k, v
  // written by their products into the skipped split_heads' memory and the logits' gradient written
  // by the loss's call: a wrong lifetime lets the memory plan hand their memory to another value,
  // and the weights differ.
  struct layout {
    const sg::program* p;
    int dp, tp;
  };
  for (layout l : {layout{&sharded, 1, 1}, layout{&sharded, 2, 2}, layout{&recompute_full, 2, 1},
                   layout{&recompute_attention, 2, 1}, layout{&zero3, 2, 1}}) {
    CAPTURE(l.dp, l.tp);
    const weights fused = train_on([] { return sg::cpu::backend{}; }, *l.p, l.dp, l.tp, 2, 1, nullptr);
    const weights apart =
        train_on([] { return sg::cpu::backend{}; }, *l.p, l.dp, l.tp, 2, 1, nullptr, options, every_step_apart);
    CHECK(fused == apart);
    const weights lowered = train_on([] { return cpu_running_no_fused_kind{}; }, *l.p, l.dp, l.tp, 2, 1, nullptr);
    CHECK(lowered == apart);
  }
}

// The calls one training step makes on its backend, by kind: what a GPU launches per step.
struct cpu_counting_calls : sg::testing::cpu_fused_calls {
  std::map<std::string, int>* calls = nullptr;
  void copy(const buffer& from, buffer& to) {
    ++(*calls)["copy"];
    sg::cpu::backend::copy(from, to);
  }
  void fill_zero(buffer& b) {
    ++(*calls)["fill_zero"];
    sg::cpu::backend::fill_zero(b);
  }
  void add_scaled(const buffer& from, buffer& to, double factor) {
    ++(*calls)["add_scaled"];
    sg::cpu::backend::add_scaled(from, to, factor);
  }
  void scale(buffer& b, double factor) {
    ++(*calls)["scale"];
    sg::cpu::backend::scale(b, factor);
  }
  void adamw_many(std::span<const sg::compute::adamw_update<buffer>> updates) {
    ++(*calls)["adamw_many"];
    sg::cpu::backend::adamw_many(updates);
  }
  void run(const sg::compute::kernel_call<buffer>& call) {
    ++(*calls)[std::string(sg::op_name(call.kind))];
    if (call.key_grad != nullptr) ++(*calls)[std::string(sg::op_name(call.kind)) + " with dk and dv"];
    if (call.weight_grad != nullptr) ++(*calls)[std::string(sg::op_name(call.kind)) + " with dw"];
    if (call.logits_grad != nullptr) ++(*calls)[std::string(sg::op_name(call.kind)) + " with its gradient"];
    using sg::compute::product_epilogue;
    const std::string then = std::string(sg::op_name(call.kind)) + " then ";
    if (call.epilogue == product_epilogue::gelu) ++(*calls)[then + "gelu"];
    if (call.epilogue == product_epilogue::gelu_grad) ++(*calls)[then + "gelu_grad"];
    if (call.epilogue == product_epilogue::add) ++(*calls)[then + "add"];
    if (call.output_kept) ++(*calls)[then + "its gradients read its result"];
    if (call.batch > 1)
      ++(*calls)[std::string(sg::op_name(call.kind)) + " batch of " + std::to_string(call.batch)];
    if (call.side != nullptr && call.kind != sg::op::linear && call.epilogue == product_epilogue::none)
      ++(*calls)[std::string(sg::op_name(call.kind)) + " reading the forward's result"];
    sg::testing::cpu_fused_calls::run(call);
  }
};

TEST_CASE("trainer: a one-rank step copies only the loss, and sums nothing", "[runtime][training][threads]") {
  std::map<std::string, int> calls;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    cpu_counting_calls backend;
    backend.calls = &calls;
    auto rank = sg::bind(single, config.sizes(batch, seq), comm, backend, {}, sg::random_weights(), {},
                         {.outputs = {"loss"}});
    sg::trainer t(rank, options);
    t.step(tokens(batch, 0, 0));
    calls.clear();
    t.step(tokens(batch, 0, 1));
  });
  // No repeat block copies its input in, its result out or a result between layers: the step
  // before each block writes its first layer's input (plan_block_inputs), the forward block writes
  // each layer's result into the next layer's input (kept per layer for the backward), the backward
  // block alternates two buffers, and the last layer writes the block's value (plan_carried_results).
  CHECK(calls["copy"] == 1);                            // the loss to its output
  CHECK(calls["fill_zero"] == 0);                       // no gradient sum to clear, add to or clip
  CHECK(calls["add_scaled"] == 0);
  CHECK(calls["scale"] == 0);
  CHECK(calls["adamw_many"] == 1);
  // Column sums of the layer norms' weights and biases come with the norms' input gradients, the
  // linears' biases' with their weight products.
  CHECK(calls["bias_grad"] == 0);
  CHECK(calls["layer_norm_grad_w"] == 0);
  CHECK(calls["layer_norm_grad_x with dw"] == 2 * config.layers + 1);
  // q's, k's and v's products (of one normed x) run as one batched call, forward and weight
  // gradients, their operands placed at equal strides by bind.
  CHECK(calls["linear_weight_grad"] == 4 * config.layers + 1);  // and the tied head's
  CHECK(calls["linear_weight_grad batch of 3"] == config.layers);
  CHECK(calls["linear batch of 3"] == config.layers);
  // Every bias is added by its product, the MLP's GELU and its gradient too; the residual adds
  // after the two projections and the sums of q's, k's and v's input gradients (two a layer) are
  // the products' too, the residual gradients' sums (two a layer) the norms' gradients', and the
  // tied table's gradient sum the lookup gradient's, written into the table's gradient buffer.
  CHECK(calls["add_bias"] == 0);
  CHECK(calls["gelu"] == 0);
  CHECK(calls["gelu_grad"] == 0);
  CHECK(calls["linear then gelu"] == config.layers);
  CHECK(calls["linear then gelu_grad"] == config.layers);
  CHECK(calls["linear then add"] == 4 * config.layers);
  CHECK(calls["layer_norm_grad_x then add"] == 2 * config.layers);
  CHECK(calls["add"] == 0);
  CHECK(calls["embedding_grad then add"] == 1);
  // Attention reads q, k, v (and the output's gradient) as their products wrote them and writes
  // its result (and the gradients) as the next products read them: no split or merge of heads.
  CHECK(calls["split_heads"] == 0);
  CHECK(calls["merge_heads"] == 0);
  CHECK(calls["attention"] == config.layers);
  CHECK(calls["attention_grad_q"] == config.layers);
  // dk and dv come with dq from one backward: no calls of their own.
  CHECK(calls["attention_grad_q with dk and dv"] == config.layers);
  CHECK(calls["attention_grad_k"] == 0);
  CHECK(calls["attention_grad_v"] == 0);
  // The backward reads the forward's result where it is (the merge's buffer, kept for the
  // projection's weight gradient) instead of running the forward again.
  CHECK(calls["attention then its gradients read its result"] == config.layers);
  CHECK(calls["attention_grad_q reading the forward's result"] == config.layers);
  // The loss's call writes the logits' gradient as it reads them.
  CHECK(calls["cross_entropy"] == 1);
  CHECK(calls["cross_entropy with its gradient"] == 1);
  CHECK(calls["cross_entropy_grad"] == 0);
}

// Forward only, q, k and v (their results in the memory arena, not kept) are one batched product a
// layer too, with the same logits as the three apart.
TEST_CASE("trainer: an inference forward batches q's, k's and v's products, with the same logits as apart",
          "[runtime][threads]") {
  static constexpr sg::program forward_only = sg::compile<gpt2_single>();
  std::map<std::string, int> calls;
  const auto logits = [&](auto backend, sg::memory_options memory = {}) {
    std::vector<std::byte> bytes;
    memory.outputs = {"logits"};
    sg::threads::world(1).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(forward_only, config.sizes(batch, seq), comm, backend, {}, sg::random_weights(),
                           {}, memory);
      const sg::host_tensor out = rank.forward(tokens(batch, 0, 0)).at("logits");
      bytes.assign(out.bytes().begin(), out.bytes().end());
    });
    return bytes;
  };
  cpu_counting_calls counting;
  counting.calls = &calls;
  const std::vector<std::byte> batched = logits(counting);
  CHECK(calls["linear batch of 3"] == config.layers);
  CHECK(calls["linear"] == 4 * config.layers + 1);  // q, k, v; the projection; fc; its projection; the head
  // The layers' activations alternate between two buffers, the embeddings write the first and the
  // last layer the block's value (plan_block_inputs, plan_carried_results): only the logits' output
  // copies.
  CHECK(calls["copy"] == 1);
  CHECK(logits(sg::cpu::backend{}, every_step_apart) == batched);
}

// One micro-batch reads the gradients directly (no sum); two sum them first: the same update.
TEST_CASE("trainer: two micro-batches of half the batch equal one batch", "[runtime][training][threads]") {
  const weights one = train(sharded, 2, 2, 2, 1, nullptr);
  const weights two = train(sharded, 2, 2, 2, 2, nullptr);
  CHECK(max_relative_difference(two, one) < 1e-9);
}

TEST_CASE("trainer: an inference program is refused with the fix", "[runtime][training]") {
  static constexpr sg::program forward_only = sg::compile<gpt2_single>();
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    auto rank =
        sg::bind(forward_only, config.sizes(batch, seq), comm, sg::cpu::backend{}, {}, sg::random_weights());
    CHECK(sg::testing::contains(sg::testing::error_of([&] { sg::trainer t(rank, options); }),
                                "compile the model with shardgraph::training{}"));
  });
}

// A kernel that fails on the n-th call of one op, as a CUDA launch or a cuBLAS call may.
struct cpu_failing_kernel : sg::cpu::backend {
  std::shared_ptr<int> calls_left = std::make_shared<int>(0);  // (copies of the backend share it)
  void run(const sg::compute::kernel_call<buffer>& call) {
    if (call.kind == sg::op::layer_norm_grad_x && --*calls_left == 0)
      sg::fail("cpu::backend: layer_norm_grad_x", "the kernel failed", "check the device");
    sg::cpu::backend::run(call);
  }
};

TEST_CASE("trainer: a failing kernel names the step, the op, its node and layer, and the rank",
          "[runtime][training][threads]") {
  cpu_failing_kernel backend;
  // A step runs 2 layers + 1 norms' input gradients, the final norm's first, then the last
  // layer's: fail at the second of step 2.
  *backend.calls_left = (2 * static_cast<int>(config.layers) + 1) + 2;
  const std::string message = sg::testing::error_of([&] {
    sg::threads::world(1).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(single, config.sizes(batch, seq), comm, backend, {}, sg::random_weights());
      sg::trainer t(rank, options);
      t.step(tokens(batch, 0, 0));
      t.step(tokens(batch, 0, 1));
    });
  });
  CAPTURE(message);
  CHECK(sg::testing::contains(message,
                              "shardgraph: trainer step 2, micro-batch 0: forward: layer_norm_grad_x '"));
  CHECK(sg::testing::contains(message, " in layer " + std::to_string(config.layers - 1) + " on rank 0: "));
  CHECK(
      sg::testing::contains(message, "cpu::backend: layer_norm_grad_x: the kernel failed. check the device"));
}

TEST_CASE("trainer: with check_finite, a NaN stops training at the step and the first op that made it",
          "[runtime][training][threads]") {
  // One NaN in layer 1's MLP input weight: the first op to produce a non-finite value is that linear.
  sg::weight_source poisoned = [base = sg::random_weights(3, 0.3)](std::string_view name,
                                                                   const sg::tensor_slice& slice,
                                                                   sg::host_tensor& out) {
    base(name, slice, out);
    if (name == "h.1.mlp.c_fc.weight") out.values<double>()[0] = std::nan("");
  };
  sg::training_options checked = options;
  checked.check_finite = true;
  const std::string message = sg::testing::error_of([&] {
    sg::threads::world(2).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(sharded, config.sizes(batch, seq), comm, sg::cpu::backend{},
                           sg::mesh_shape{{"tp", 2}}, poisoned);
      sg::trainer t(rank, checked);
      t.step(tokens(batch, 0, 0));
    });
  });
  CHECK(sg::testing::contains(
      message, "shardgraph: trainer step 1, micro-batch 0: forward: linear 'h.mlp.c_fc' in layer 1"));
  CHECK(sg::testing::contains(message, "produced a NaN or an infinity"));
}
