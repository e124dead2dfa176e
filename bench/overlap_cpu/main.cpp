// overlap_cpu: how much of a data-parallel step's communication the communication threads hide
// (training{.overlap_communication}), on thread ranks whose collectives first wait as long as a
// network link would take (slow_link.hpp). A GPT-2-shaped model in f32 trains on dp ranks under
// ZeRO stages 0, 2 and 3; each configuration runs with overlap off and on (ZeRO-2 also without
// buckets: each gradient reduce-scattered after backward), in turns (--rounds of --steps steps
// each, so that the machine's drift falls on all alike). One JSON line per configuration and setting:
//   step_ms       median step time of rank 0 over every round
//   link_ms       time rank 0's collectives waited for the link per step (every thread)
//   hidden        (step_ms off - step_ms) / link_ms of the run with buckets and without overlap
//
//   overlap_cpu [--dp 2] [--link-gbs 0.05] [--latency-us 20] [--bucket-mb 4] [--steps 5] [--rounds 3]
//               [--model 256] [--layers 4] [--batch 4] [--seq 64]
//
// The link sleeps instead of computing, as a network card moves data while the cores compute,
// so the figures show the overlap of the schedule, not of this machine's memory system. On the
// GPU the same threads drive NCCL on its own stream (docs/tutorial/02_training.md, Overlap).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "slow_link.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
using link_comm = sg::bench::slow_link<sg::threads::communicator>;
constexpr sg::graph sharded() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f32}); }
constexpr sg::program zero0 = sg::compile<sharded, sg::training{.zero_stage = 0}>();
constexpr sg::program zero2 = sg::compile<sharded, sg::training{.zero_stage = 2}>();
constexpr sg::program zero3 = sg::compile<sharded, sg::training{.zero_stage = 3}>();

struct settings {
  int dp = 2, steps = 5, rounds = 3;
  double link_gbs = 0.05, bucket_mb = 4;
  int latency_us = 20;
  std::int64_t model = 256, layers = 4, batch = 4, seq = 64;
};

struct run_figures {
  std::vector<double> step_ms;
  double link_ms = 0;
};

// buckets false: no gradient buckets (training{.bucket_bytes = 0}); under ZeRO-2 the trainer then
// reduce-scatters each gradient after backward.
run_figures measure(const sg::program& compiled, bool overlap, bool buckets, const settings& s) {
  auto p = std::make_unique<sg::program>(compiled);
  p->overlap_communication = overlap;
  p->bucket_bytes = buckets ? static_cast<std::int64_t>(s.bucket_mb * 1024 * 1024) : 0;
  const sg::models::gpt2_config config{
      .vocab = 2048, .positions = s.seq, .model = s.model, .heads = 4, .layers = s.layers};
  const std::int64_t rows = s.batch * s.dp;  // the global batch: s.batch rows per rank
  std::vector<std::int64_t> ids(static_cast<std::size_t>(rows * s.seq));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 2654435761u) % 2048);
  sg::tensor_map batch;
  batch.emplace("input_ids", sg::host_tensor::from<std::int64_t>({rows, s.seq}, ids));
  batch.emplace("targets", sg::host_tensor::from<std::int64_t>({rows, s.seq}, ids));
  const sg::training_options options{
      .adamw = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1},
      .schedule = std::nullopt,
      .max_grad_norm = 1.0};
  const sg::bench::link_model link{.bytes_per_second = s.link_gbs * 1e9,
                                   .latency = std::chrono::microseconds(s.latency_us)};
  run_figures figures;
  sg::threads::world(s.dp).run([&](sg::threads::communicator& threads) {
    link_comm comm(threads, link);
    auto rank =
        sg::bind(*p, config.sizes(rows, s.seq), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", s.dp}},
                 sg::random_weights(1, 0.02), {}, {.outputs = {"loss"}});  // a step reads the loss only
    sg::trainer t(rank, options);
    t.step(batch);  // warm-up: first touches of every buffer
    std::vector<double> ms;
    const std::int64_t waited_before = comm.waited_ns();
    for (int step = 0; step < s.steps; ++step) {
      threads.barrier();
      const auto start = std::chrono::steady_clock::now();
      t.step(batch);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    if (comm.rank() == 0)
      figures = {ms, static_cast<double>(comm.waited_ns() - waited_before) / 1e6 / s.steps};
  });
  return figures;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void compare(const sg::program& p, int zero, const settings& s) {
  struct setting {
    bool overlap, buckets;
    std::vector<double> step_ms;
    double link_ms = 0, median_ms = 0;
  };
  // ZeRO-2 adds its path without buckets: every gradient reduce-scattered after backward.
  std::vector<setting> runs{{false, true, {}}, {true, true, {}}};
  if (zero == 2) runs.push_back({false, false, {}});
  for (int round = 0; round < s.rounds; ++round)
    for (setting& x : runs) {
      const run_figures f = measure(p, x.overlap, x.buckets, s);
      x.step_ms.insert(x.step_ms.end(), f.step_ms.begin(), f.step_ms.end());
      x.link_ms = f.link_ms;
    }
  for (setting& x : runs) x.median_ms = median(x.step_ms);
  const setting& off = runs[0];
  for (const setting& f : runs)
    std::printf(
        "{\"bench\": \"overlap_cpu\", \"zero\": %d, \"dp\": %d, \"overlap\": %s, \"buckets\": %s, "
        "\"model\": %lld, \"layers\": "
        "%lld, \"batch_per_rank\": %lld, \"seq\": %lld, \"bucket_mb\": %.1f, \"link_gbs\": %.3f, "
        "\"step_ms\": %.1f, \"link_ms\": %.1f, \"hidden\": %.2f}\n",
        zero, s.dp, f.overlap ? "true" : "false", f.buckets ? "true" : "false",
        static_cast<long long>(s.model), static_cast<long long>(s.layers), static_cast<long long>(s.batch),
        static_cast<long long>(s.seq), s.bucket_mb, s.link_gbs, f.median_ms, f.link_ms,
        (off.median_ms - f.median_ms) / off.link_ms);
  std::fflush(stdout);
}

int usage(const char* option) {
  std::fprintf(stderr,
               "shardgraph: overlap_cpu: unknown or incomplete option %s. see the comment at the top of "
               "bench/overlap_cpu/main.cpp\n",
               option);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; i += 2) {
    const std::string_view a = argv[i];
    if (i + 1 >= argc) return usage(argv[i]);
    const std::string v = argv[i + 1];
    if (a == "--dp")
      s.dp = std::stoi(v);
    else if (a == "--link-gbs")
      s.link_gbs = std::stod(v);
    else if (a == "--latency-us")
      s.latency_us = std::stoi(v);
    else if (a == "--bucket-mb")
      s.bucket_mb = std::stod(v);
    else if (a == "--steps")
      s.steps = std::max(1, std::stoi(v));
    else if (a == "--rounds")
      s.rounds = std::max(1, std::stoi(v));
    else if (a == "--model")
      s.model = std::stoll(v);
    else if (a == "--layers")
      s.layers = std::stoll(v);
    else if (a == "--batch")
      s.batch = std::stoll(v);
    else if (a == "--seq")
      s.seq = std::stoll(v);
    else
      return usage(argv[i]);
  }
  if (s.dp < 2 || !(s.link_gbs > 0) || !(s.bucket_mb > 0)) {
    std::fprintf(stderr,
                 "shardgraph: overlap_cpu: --dp must be 2 or more, --link-gbs and --bucket-mb positive. "
                 "there is nothing to overlap otherwise\n");
    return 2;
  }
  try {
    compare(zero0, 0, s);
    compare(zero2, 2, s);
    compare(zero3, 3, s);
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
