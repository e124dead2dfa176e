// train_gpt2: GPT-2 training steps on one GPU through the executor, the trainer (AdamW, f32 master
// weights under bf16) and cuda::backend. Prints per-step progress on stderr and one line
//   RESULT {"impl": "shardgraph", "model": "124M", "tokens_per_s": ..., "step_ms_median": ..., "mfu": ...,
//           "peak_allocated_gib": ..., ...}
// which bench/compare_pytorch.py reads (--shardgraph build-gpu/bench/train_gpt2).
//
//   train_gpt2 [--model 124M|350M] [--batch 16] [--seq 1024] [--steps 20] [--warmup 5] [--precision bf16|f32]
//              [--profile 1] [--graphs 0|1] [--gemm timed|heuristic]
//
// --profile 1 times every op on the GPU (the backend's profile mode, which waits for each op) and
// prints one line per op, largest first: KERNEL {"op": "linear bf16", "calls_per_step": 74,
// "ms_per_step": 9.1}. Its step times include the waiting; take the speed figures from a run without it.
// --graphs 0 launches every op of every step (by default the second step's forward and backward are
// recorded as one CUDA graph and the later ones replay it: "replayed_steps" in the RESULT line).
// --gemm heuristic runs cuBLASLt's first heuristic answer for every product instead of the fastest
// of its first answers, timed at the first step (the backend's default); stderr says how many plans
// the timing changed and the milliseconds of one call of each, with the first answer and chosen
// (with --profile 1, of every timed plan: the step's products one by one).
//
// MFU counts 6 N + 12 L H Q T FLOPs per token (N parameters without the position table, the tied
// table once; L layers, H heads, Q head size, T tokens per sequence) against 989.4 TFLOP/s, the
// H200's dense bf16 peak, as compare_pytorch.py does. The vocabulary is 50304 (GPT-2's 50257
// padded to a multiple of 128, as llm.c and nanoGPT train it). Token ids are random.
#include <shardgraph/cuda/backend.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;

template <sg::dtype T>
constexpr sg::graph gpt2_one_gpu() {
  return sg::models::gpt2<Mesh>({.type = T, .data_axis = "", .tensor_axis = ""});
}
constexpr sg::program bf16_program = sg::compile<gpt2_one_gpu<sg::dtype::bf16>, sg::training{}>();
constexpr sg::program f32_program = sg::compile<gpt2_one_gpu<sg::dtype::f32>, sg::training{}>();

struct options {
  std::string model = "124M", precision = "bf16";
  std::int64_t batch = 16, seq = 1024;
  int steps = 20, warmup = 5;
  bool profile = false, graphs = true;
  sg::cuda::gemm_choice gemm = sg::cuda::gemm_choice::timed;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "shardgraph: train_gpt2: %s. usage: train_gpt2 [--model 124M|350M] [--batch B] [--seq T] "
               "[--steps S] [--warmup W] [--precision bf16|f32] [--profile 1] [--graphs 0|1] [--gemm "
               "timed|heuristic]\n",
               why.c_str());
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage("option " + a + " needs a value");
    const std::string v = argv[++i];
    try {
      if (a == "--model")
        o.model = v;
      else if (a == "--precision")
        o.precision = v;
      else if (a == "--batch")
        o.batch = std::stoll(v);
      else if (a == "--seq")
        o.seq = std::stoll(v);
      else if (a == "--steps")
        o.steps = std::stoi(v);
      else if (a == "--warmup")
        o.warmup = std::stoi(v);
      else if (a == "--profile")
        o.profile = std::stoi(v) != 0;
      else if (a == "--graphs")
        o.graphs = std::stoi(v) != 0;
      else if (a == "--gemm" && (v == "timed" || v == "heuristic"))
        o.gemm = v == "timed" ? sg::cuda::gemm_choice::timed : sg::cuda::gemm_choice::heuristic;
      else if (a == "--gemm")
        usage("--gemm is timed or heuristic");
      else
        usage("unknown option " + a);
    } catch (const std::logic_error&) {
      usage("option " + a + " takes a number, not '" + v + "'");
    }
  }
  if (o.model != "124M" && o.model != "350M") usage("--model is 124M or 350M");
  if (o.precision != "bf16" && o.precision != "f32") usage("--precision is bf16 or f32");
  if (o.batch < 1 || o.seq < 1 || o.seq > 1024 || o.steps < 1 || o.warmup < 0)
    usage("--batch, --steps >= 1, --warmup >= 0, 1 <= --seq <= 1024");
  return o;
}

sg::tensor_map random_batch(std::int64_t batch, std::int64_t seq, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::int64_t> token(0, 50256);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch * seq)), targets(ids.size());
  for (auto& t : ids) t = token(rng);
  for (auto& t : targets) t = token(rng);
  sg::tensor_map m;
  m.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, targets));
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  const sg::models::gpt2_config config =
      o.model == "124M" ? sg::models::gpt2_config::small() : sg::models::gpt2_config::medium();
  const sg::program& program = o.precision == "bf16" ? bf16_program : f32_program;
  const double L = static_cast<double>(config.layers), H = static_cast<double>(config.heads),
               Q = static_cast<double>(config.model / config.heads), T = static_cast<double>(o.seq);
  const double d = static_cast<double>(config.model);
  // Parameters without wpe: wte, and per layer 12 d^2 + 13 d, and the final norm.
  const double params = static_cast<double>(config.table_rows()) * d + L * (12 * d * d + 13 * d) + 2 * d;
  const double flops_per_token = 6 * params + 12 * L * H * Q * T;
  const double peak_flops = 989.4e12;
  int status = 0;
  try {
    sg::threads::world(1).run([&](sg::threads::communicator& comm) {
      std::size_t free_before = 0, total = 0;
      sg::cuda::check_cuda(cudaMemGetInfo(&free_before, &total), "train_gpt2 (cudaMemGetInfo)");
      const auto bind_start = std::chrono::steady_clock::now();
      sg::cuda::backend gpu({.profile = o.profile, .graphs = o.graphs, .gemm = o.gemm});
      auto rank = sg::bind(program, config.sizes(o.batch, o.seq), comm, gpu,
                           sg::mesh_shape{{"dp", 1}, {"tp", 1}}, sg::random_weights(1, 0.02), {},
                           {.outputs = {"loss"}});  // the step reads the loss only: the logits are reused
      sg::training_options training{
          .adamw = {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1},
          .schedule = std::nullopt,
          .max_grad_norm = 0};
      sg::trainer trainer(rank, training);
      const double bind_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - bind_start).count();
      std::fprintf(stderr, "train_gpt2: GPT-2 %s %s, B=%lld T=%lld, bound in %.1f s\n", o.model.c_str(),
                   o.precision.c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.seq),
                   bind_s);
      std::mt19937_64 rng(1234);
      const sg::tensor_map batch = random_batch(o.batch, o.seq, rng);
      std::vector<double> step_ms;
      double first_loss = 0, last_loss = 0;
      std::size_t device_used_peak = 0;
      for (int s = 0; s < o.warmup + o.steps; ++s) {
        const auto start = std::chrono::steady_clock::now();
        const sg::step_report r = trainer.step(batch);  // the loss is read back: the step has finished
        gpu.synchronize();
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        std::size_t free_now = 0;
        sg::cuda::check_cuda(cudaMemGetInfo(&free_now, &total), "train_gpt2 (cudaMemGetInfo)");
        device_used_peak = std::max(device_used_peak, free_before - free_now);
        if (s == 0) first_loss = r.loss;
        last_loss = r.loss;
        if (s >= o.warmup) step_ms.push_back(ms);
        if (s + 1 == o.warmup) gpu.reset_profile();
        std::fprintf(stderr, "train_gpt2: step %d%s loss %.4f  %.1f ms\n", s + 1,
                     s < o.warmup ? " (warmup)" : "", r.loss, ms);
      }
      const double med = median(step_ms), best = *std::min_element(step_ms.begin(), step_ms.end());
      const double tokens_per_s = static_cast<double>(o.batch * o.seq) / (med / 1e3);
      const double gib = 1024.0 * 1024.0 * 1024.0;
      const auto held = rank.memory();
      const auto trainer_held = trainer.memory();
      std::fprintf(
          stderr,
          "train_gpt2: after the steps, values hold parameters %.2f GiB, gradients %.2f, activations %.2f "
          "(of which "
          "arena %.2f, holding values of %.2f), optimizer %.2f\n",
          held.parameters / gib, held.gradients / gib, held.activations / gib, held.arena / gib,
          held.arena_values / gib,
          (trainer_held.master_weights + trainer_held.optimizer_states + trainer_held.gradient_sums) / gib);
      const auto& choices = gpu.gemm_choices();
      std::fprintf(
          stderr,
          "train_gpt2: GEMM plans timed %zu, of which %d chose another than cuBLASLt's first answer; "
          "one call of each timed plan: %.3f ms with the first answers, %.3f ms as chosen\n",
          choices.plans.size(), choices.changed(), choices.first_ms(), choices.chosen_ms());
      for (const auto& p : choices.plans)  // profiling: every plan, the step's products one call each
        if (p.chosen_ms < p.first_ms || o.profile)
          std::fprintf(stderr, "train_gpt2:   %s: %.3f -> %.3f ms\n", p.what.c_str(), p.first_ms,
                       p.chosen_ms);
      const double allocated = static_cast<double>(gpu.peak_bytes() + gpu.scratch_bytes()) / gib;
      std::printf(
          "RESULT {\"impl\": \"shardgraph\", \"model\": \"%s\", \"precision\": \"%s\", \"batch\": %lld, "
          "\"seq\": %lld, "
          "\"step_ms_median\": %.3f, \"step_ms_min\": %.3f, \"tokens_per_s\": %.1f, \"mfu\": %.4f, "
          "\"peak_allocated_gib\": %.3f, \"values_peak_gib\": %.3f, \"scratch_gib\": %.3f, "
          "\"device_used_gib\": %.3f, "
          "\"params\": %.0f, \"loss_first\": %.4f, \"loss_last\": %.4f, \"bind_s\": %.2f, "
          "\"replayed_steps\": %d}\n",
          o.model.c_str(), o.precision.c_str(), static_cast<long long>(o.batch),
          static_cast<long long>(o.seq), med, best, tokens_per_s, flops_per_token * tokens_per_s / peak_flops,
          allocated, static_cast<double>(gpu.peak_bytes()) / gib,
          static_cast<double>(gpu.scratch_bytes()) / gib, static_cast<double>(device_used_peak) / gib, params,
          first_loss, last_loss, bind_s, rank.replayed_runs());
      double profiled = 0;
      for (const sg::cuda::op_time& t : gpu.profile()) {
        profiled += t.ms / o.steps;
        std::printf("KERNEL {\"op\": \"%s\", \"calls_per_step\": %.1f, \"ms_per_step\": %.3f}\n",
                    t.name.c_str(), static_cast<double>(t.calls) / o.steps, t.ms / o.steps);
      }
      if (gpu.profiling()) std::printf("KERNEL {\"op\": \"all\", \"ms_per_step\": %.3f}\n", profiled);
      std::fflush(stdout);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    status = 1;
  }
  return status;
}
