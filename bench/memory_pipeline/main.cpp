// memory_pipeline: per-stage memory of a GPT-2 124M-size training step on pp thread ranks under
// each pipeline schedule: the micro-batches whose activations bind planned to keep at once (from
// the schedule), how many the step kept (observed), the activation bytes, and the CPU time per
// step. One JSON line per stage and schedule, then the same for one rank accumulating the
// micro-batches.
//
//   memory_pipeline [--pp 4] [--micro-batches 8] [--rows 1] [--seq 64] [--steps 1]
//
// Expected: 1F1B keeps pp - s micro-batches on stage s, GPipe all of them; activations scale with
// that count (each micro-batch in flight has its own copy of the stage's activations).
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

using Mesh = sg::mesh<"dp", "tp", "pp">;

struct settings {
  int pp = 4, micro_batches = 8, steps = 1;
  std::int64_t rows = 1, seq = 64;  // rows per micro-batch
};

void measure(const sg::program& p, const settings& o, int pp, const sg::pipeline_options& pipe,
             const char* label) {
  const sg::models::gpt2_config config = sg::models::gpt2_config::small();
  std::vector<sg::tensor_map> parts;
  for (int k = 0; k < o.micro_batches; ++k) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(o.rows * o.seq));
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] =
          static_cast<std::int64_t>(((i + static_cast<std::size_t>(k) * ids.size()) * 2654435761u) % 50257);
    sg::tensor_map m;
    m.emplace("input_ids", sg::host_tensor::from<std::int64_t>({o.rows, o.seq}, ids));
    m.emplace("targets", sg::host_tensor::from<std::int64_t>({o.rows, o.seq}, ids));
    parts.push_back(std::move(m));
  }
  const sg::training_options options{
      .adamw = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1},
      .schedule = std::nullopt,
      .max_grad_norm = 1.0};
  sg::threads::world(pp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, config.sizes(o.rows, o.seq), comm, sg::cpu::backend{}, sg::mesh_shape{{"pp", pp}},
                         sg::random_weights(1, 0.02), pipe);
    sg::trainer t(rank, options);
    double seconds = 0, loss = 0;
    for (int s = 0; s < o.steps; ++s) {
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      loss = t.step(parts).loss;
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    const auto m = rank.memory();
    const double mib = 1024.0 * 1024.0;
    // One line per stage, in stage order.
    for (int s = 0; s < comm.size(); ++s) {
      comm.barrier();
      if (s != comm.rank()) continue;
      std::printf(
          "{\"bench\": \"memory_pipeline\", \"model\": \"gpt2-124M\", \"schedule\": \"%s\", \"pp\": %d, "
          "\"stage\": %d, \"micro_batches\": %d, \"rows\": %lld, \"seq\": %lld, \"planned_in_flight\": %d, "
          "\"observed_in_flight\": %d, \"activations_mib\": %.1f, \"per_micro_batch_mib\": %.1f, "
          "\"parameters_mib\": %.1f, "
          "\"communication_mib\": %.1f, \"step_s\": %.2f, \"loss\": %.5f}\n",
          label, pp, comm.rank(), o.micro_batches, static_cast<long long>(o.rows),
          static_cast<long long>(o.seq), m.micro_batches_in_flight,
          rank.pipelined() ? rank.observed_micro_batches_in_flight() : 1, m.activations / mib,
          m.activations_per_micro_batch / mib, m.parameters / mib, m.communication / mib, seconds, loss);
      std::fflush(stdout);
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  settings o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    if (a == "--pp")
      o.pp = std::stoi(argv[i + 1]);
    else if (a == "--micro-batches")
      o.micro_batches = std::stoi(argv[i + 1]);
    else if (a == "--rows")
      o.rows = std::stoll(argv[i + 1]);
    else if (a == "--seq")
      o.seq = std::stoll(argv[i + 1]);
    else if (a == "--steps")
      o.steps = std::max(1, std::stoi(argv[i + 1]));
    else {
      std::fprintf(stderr,
                   "shardgraph: memory_pipeline: unknown option %s. see the comment at the top of "
                   "bench/memory_pipeline/main.cpp\n",
                   argv[i]);
      return 2;
    }
  }
  try {
    const auto p = std::make_unique<sg::program>(
        sg::compile_graph(sg::models::gpt2<Mesh>({.type = sg::dtype::f32}), sg::training{}));
    using sg::pipeline::schedule_kind;
    measure(*p, o, o.pp, {.schedule = schedule_kind::gpipe, .micro_batches = o.micro_batches}, "gpipe");
    measure(*p, o, o.pp, {.schedule = schedule_kind::one_f_one_b, .micro_batches = o.micro_batches}, "1f1b");
    if (o.micro_batches % o.pp == 0)
      measure(*p, o, o.pp,
              {.schedule = schedule_kind::interleaved_1f1b,
               .micro_batches = o.micro_batches,
               .virtual_stages = 2},
              "interleaved-1f1b");
    measure(*p, o, 1, {}, "one rank, accumulating");
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
