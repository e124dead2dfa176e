// memory_zero: per-rank memory of a GPT-2 124M-size training step by ZeRO stage, on dp thread
// ranks, against one rank: what bind and the trainer allocate (observed), next to the formula
// (docs/tutorial/02_training.md), and the CPU time per step. One JSON line per configuration.
//
//   memory_zero [--dp 4] [--batch 4] [--seq 64] [--steps 2]
//
// Formula per rank, P = parameters on the rank (f32, 4 bytes), D = dp:
//   parameters 4P (stages 0-2) or 4P/D (stage 3, plus the gathered weights: two layers and the
//   weights outside the blocks, held during a step);  gradients 4P (stages 0, 1) or 4P/D (stages 2,
//   3: each whole gradient is reduce-scattered in a bucket during backward and its buffer shared
//   with the activations, so the rank keeps its chunks);
//   gradient sums 0 (stage 0: a step of one micro-batch, as here, hands the gradients to AdamW
//   directly), 4P (stage 1) or 4P/D (stages 2, 3);  AdamW states 8P (stage 0) or 8P/D (stages 1-3).
// The ZeRO-2 line "dp, no buckets" (training{.bucket_bytes = 0}) keeps the whole gradients: 4P.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::graph sharded() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f32}); }
constexpr sg::graph single() {
  return sg::models::gpt2<Mesh>({.type = sg::dtype::f32, .data_axis = "", .tensor_axis = ""});
}
constexpr sg::program zero0 = sg::compile<sharded, sg::training{.zero_stage = 0}>();
constexpr sg::program zero1 = sg::compile<sharded, sg::training{.zero_stage = 1}>();
constexpr sg::program zero2 = sg::compile<sharded, sg::training{.zero_stage = 2}>();
constexpr sg::program zero3 = sg::compile<sharded, sg::training{.zero_stage = 3}>();
constexpr sg::program one_rank = sg::compile<single, sg::training{}>();

void measure(const sg::program& p, const char* label, int stage, int dp, std::int64_t batch, std::int64_t seq,
             int steps) {
  const sg::models::gpt2_config config = sg::models::gpt2_config::small();
  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch * seq));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 2654435761u) % 50257);
  sg::tensor_map batch_map;
  batch_map.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  batch_map.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  const sg::training_options options{
      .adamw = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1},
      .schedule = std::nullopt,
      .max_grad_norm = 1.0};
  sg::threads::world(dp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, config.sizes(batch, seq), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}},
                         sg::random_weights(1, 0.02));
    sg::trainer t(rank, options);
    std::vector<double> seconds;
    double loss = 0;
    for (int s = 0; s < steps; ++s) {
      comm.barrier();
      auto start = std::chrono::steady_clock::now();
      loss = t.step(batch_map).loss;
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (comm.rank() != 0) return;
    auto m = rank.memory();
    auto o = t.memory();
    double P = 0;
    rank.for_each_parameter([&](const std::string&, const sg::node& n, std::int64_t, auto&, auto*) {
      P += static_cast<double>(rank.local_numel(n));
    });
    const double predicted_parameters = stage == 3 ? 4 * P / dp : 4 * P;
    const double predicted_states = stage == 0 ? 8 * P : 8 * P / dp;
    const double predicted_sums = stage == 0 ? 0 : stage >= 2 ? 4 * P / dp : 4 * P;
    const double predicted_gradients = stage >= 2 && p.bucket_bytes > 0 ? 4 * P / dp : 4 * P;
    const double mib = 1024.0 * 1024.0;
    std::printf(
        "{\"bench\": \"memory_zero\", \"model\": \"gpt2-124M\", \"layout\": \"%s\", \"zero\": %d, \"dp\": "
        "%d, "
        "\"batch\": %lld, \"seq\": %lld, \"parameters_mib\": %.1f, \"parameters_formula_mib\": %.1f, "
        "\"gathered_parameters_mib\": %.1f, \"gradients_mib\": %.1f, \"gradients_formula_mib\": %.1f, "
        "\"gradient_sums_mib\": %.1f, \"gradient_sums_formula_mib\": %.1f, \"optimizer_states_mib\": %.1f, "
        "\"optimizer_states_formula_mib\": %.1f, \"activations_mib\": %.1f, \"communication_mib\": %.1f, "
        "\"total_mib\": %.1f, \"last_step_s\": %.2f, \"loss\": %.5f}\n",
        label, stage, dp, static_cast<long long>(batch), static_cast<long long>(seq), m.parameters / mib,
        predicted_parameters / mib, m.gathered_parameters / mib, m.gradients / mib, predicted_gradients / mib,
        o.gradient_sums / mib, predicted_sums / mib, o.optimizer_states / mib, predicted_states / mib,
        m.activations / mib, m.communication / mib,
        (m.parameters + m.gathered_parameters + m.gradients + m.activations + m.communication +
         o.gradient_sums + o.optimizer_states) /
            mib,
        seconds.back(), loss);
    std::fflush(stdout);
  });
}

}  // namespace

int main(int argc, char** argv) {
  int dp = 4, steps = 2;
  std::int64_t batch = 4, seq = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string_view a = argv[i];
    if (a == "--dp")
      dp = std::stoi(argv[i + 1]);
    else if (a == "--batch")
      batch = std::stoll(argv[i + 1]);
    else if (a == "--seq")
      seq = std::stoll(argv[i + 1]);
    else if (a == "--steps")
      steps = std::max(1, std::stoi(argv[i + 1]));
    else {
      std::fprintf(stderr,
                   "shardgraph: memory_zero: unknown option %s. see the comment at the top of "
                   "bench/memory_zero/main.cpp\n",
                   argv[i]);
      return 2;
    }
  }
  try {
    measure(one_rank, "one rank", 0, 1, batch, seq, steps);
    measure(zero0, "dp", 0, dp, batch, seq, steps);
    measure(zero1, "dp", 1, dp, batch, seq, steps);
    measure(zero2, "dp", 2, dp, batch, seq, steps);
    // ZeRO-2 without gradient buckets: each whole gradient kept per layer and reduce-scattered by the
    // trainer after backward
    auto unbucketed = std::make_unique<sg::program>(zero2);
    unbucketed->bucket_bytes = 0;
    measure(*unbucketed, "dp, no buckets", 2, dp, batch, seq, steps);
    measure(zero3, "dp", 3, dp, batch, seq, steps);
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
