// train_gpt: trains a small GPT on the built-in addition task ("12+345=753;", answers reversed)
// over thread ranks, for a mesh given on the command line, then reports held-out accuracy on the
// answer digits and checks that the layout trains exactly like one rank.
//
//   train_gpt [--mesh dp=2,tp=2] [--steps 2500] [--batch 16] [--seq 32] [--lr 3e-3]
//             [--precision f32|f64|bf16|fp16] [--zero 0|1|2|3] [--seed 1]
//     --bucket-mb 25                       gradient all-reduce bucket size (0: one per gradient)
//     --overlap on|off                     gradient buckets and ZeRO-3 gathers on a communication
//                                          thread while the rank computes (default on)
//     --check-finite on|off                stop at the first op producing NaN/Inf
//     --recompute none|full|attention      activation recomputation of the blocks
//     --micro-batches M                    micro-batches per step (default 1; 2 x pp with pp)
//     --schedule gpipe|1f1b|interleaved-1f1b   pipeline schedule over the pp axis (default 1f1b)
//     --virtual-stages V                   model chunks per pp rank (interleaved-1f1b: 2 or more)
//     --stage-layers 1,3                   layers per (virtual) stage; default balanced
//     --layers L                           the GPT's layers (default 2; 4 with pp > 2)
//     --require-accuracy A                 exit 1 unless held-out accuracy >= A
//     --require-loss L                     exit 1 unless the final loss <= L
//
//   addition stream --sampler--> global batch (batch, seq) --dp--> ranks (dp=i, tp=j)
//        forward + backward (tp all_reduces inside each block, dp all_reduce of every gradient)
//        --> global-norm clip --> AdamW on each rank's slice
//   with pp: the layers split over the pp ranks; micro-batches flow through them by the schedule
//   (activations forward, their gradients back, by send/recv), e.g. --mesh dp=2,tp=2,pp=2 on 8 ranks
//
// --precision bf16 / fp16 is mixed precision: the model computes and communicates in 16 bits, the
// trainer updates f32 master weights; fp16 adds dynamic loss scaling (the progress line shows the
// scale and the steps skipped on overflow). The layout check always runs in f64, where it is exact.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "addition_task.hpp"
#include "whole_parameters.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp", "pp">;
template <sg::dtype T, bool Sharded>
constexpr sg::graph build() {
  return sg::models::gpt2<Mesh>({.type = T,
                                 .layer_norm_eps = 1e-5,
                                 .data_axis = Sharded ? "dp" : "",
                                 .tensor_axis = Sharded ? "tp" : ""});
}

struct options {
  sg::mesh_shape mesh = sg::mesh_shape::parse("dp=2,tp=2");
  int steps = 2500, zero = 0;
  double bucket_mb = 25;
  bool overlap = true;
  double require_accuracy = 0, require_loss = 1e30;
  bool check_finite = false;
  sg::recompute recompute = sg::recompute::none;
  std::int64_t batch = 16, seq = 32;
  double lr = 3e-3;
  std::string precision = "f32";
  std::uint64_t seed = 1;
  int micro_batches = 0;  // 0: 1, or 2 x pp with a pipeline
  int layers = 0;         // 0: 2, or 4 with pp > 2
  sg::pipeline_options pipeline;
};

// A small GPT for a 14-token vocabulary, padded to 16 so that it divides over tp = 1, 2, 4, 8.
sg::models::gpt2_config model_config(const options& o) {
  return {.vocab = 16, .positions = o.seq, .model = 64, .heads = 4, .layers = o.layers};
}

struct token_vector {
  std::vector<std::int64_t> tokens;
  std::int64_t size() const { return static_cast<std::int64_t>(tokens.size()); }
  std::int64_t token(std::int64_t i) const { return tokens[static_cast<std::size_t>(i)]; }
};

std::string clock_text(double seconds) {
  char text[32];
  int s = static_cast<int>(std::lround(seconds));
  std::snprintf(text, sizeof text, "%d:%02d", s / 60, s % 60);
  return text;
}

// Trains `steps` steps of program p on the mesh; prints progress when `verbose`; returns rank 0's
// final weights (whole, assembled from every rank's slices) and the held-out accuracy.
struct run_result {
  sg::examples::whole_tensors weights;
  double first_loss = 0, last_loss = 0, accuracy = 0;
};

run_result train(const sg::program& p, const options& o, const sg::mesh_shape& mesh, int steps,
                 bool verbose) {
  const sg::examples::addition_task task{.max_digits = 2, .seed = o.seed, .held_out_percent = 10};
  const token_vector train_tokens{task.make_stream(200000, false)};
  const token_vector held_out_tokens{task.make_stream(4000, true)};
  const sg::models::gpt2_config config = model_config(o);
  const int ranks = mesh.world_size(p.nodes.axes);
  const sg::training_options training{
      .adamw = {.lr = o.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.01},
      .schedule = sg::warmup_cosine{.max_lr = o.lr,
                                    .min_lr = o.lr / 10,
                                    .warmup_steps = std::max(1, steps / 20),
                                    .total_steps = std::max(1, steps)},
      .max_grad_norm = 1.0,
      .check_finite = o.check_finite};
  run_result result;
  std::mutex m;
  sg::threads::world(ranks).run([&](sg::threads::communicator& comm) {
    // A pipeline's options apply where the mesh has pp ranks; micro-batches split every step.
    sg::pipeline_options pipe = o.pipeline;
    pipe.micro_batches = mesh.size("pp") > 1 ? o.micro_batches : 1;
    const int micro = o.micro_batches;
    if (o.batch % micro != 0)
      throw sg::error(sg::error_message("train_gpt --micro-batches " + std::to_string(micro),
                                        "the batch of " + std::to_string(o.batch) +
                                            " rows does not split into " + std::to_string(micro) +
                                            " micro-batches",
                                        "choose a micro-batch count that divides --batch"));
    auto rank = sg::bind(p, config.sizes(o.batch / micro, o.seq), comm, sg::cpu::backend{}, mesh,
                         sg::random_weights(o.seed, 0.1), pipe);
    if (verbose && comm.rank() == 0 && rank.pipelined()) {
      const sg::pipeline::schedule& sched = rank.pipeline_schedule();
      std::printf("pipeline: %s over pp=%d (%d virtual stages per rank), %d micro-batches of %lld rows\n%s",
                  std::string(sg::pipeline::schedule_name(sched.kind)).c_str(), sched.ranks,
                  sched.virtual_stages, sched.micro_batches, static_cast<long long>(o.batch / micro),
                  rank.pipeline_partition().report().c_str());
    }
    sg::trainer trainer(rank, training);
    sg::data::distributed_sampler sampler(sg::data::window_count(train_tokens.size(), o.seq), 0, 1, o.seed);
    sg::data::batch_loader loader(train_tokens, sampler, o.batch, o.seq);
    const auto start = std::chrono::steady_clock::now();
    int skipped = 0;
    for (int s = 1; s <= steps; ++s) {
      sg::step_report r = trainer.step(sg::data::split_micro_batches(loader.next_global_batch(), micro));
      if (s == 1) result.first_loss = r.loss;
      result.last_loss = r.loss;
      skipped += r.skipped;
      if (verbose && comm.rank() == 0 && (s == 1 || s % 25 == 0 || s == steps)) {
        double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::string scaling;
        if (o.precision == "fp16")
          scaling = " | loss scale 2^" +
                    std::to_string(static_cast<int>(std::lround(std::log2(r.loss_scale)))) + ", " +
                    std::to_string(skipped) + " skipped";
        std::printf("step %4d/%d | loss %.4f | grad norm %6.3f | lr %.2e%s | %7.0f tok/s | %s left\n", s,
                    steps, r.loss, r.grad_norm, r.lr, scaling.c_str(),
                    static_cast<double>(s * o.batch * o.seq) / elapsed,
                    clock_text(elapsed / s * (steps - s)).c_str());
        std::fflush(stdout);
      }
    }
    // Held-out accuracy on answer digits: the training program's forward also returns logits.
    sg::data::distributed_sampler held_sampler(sg::data::window_count(held_out_tokens.size(), o.seq), 0, 1,
                                               o.seed, false);
    sg::data::batch_loader held_loader(held_out_tokens, held_sampler, o.batch, o.seq);
    sg::data::accuracy_count score;
    for (std::int64_t b = 0; b < held_loader.steps_per_epoch(); ++b)
      for (const sg::tensor_map& batch : sg::data::split_micro_batches(held_loader.global_batch(b), micro)) {
        sg::tensor_map out = rank.forward(batch);  // bound for one micro-batch's rows
        auto predicted = sg::data::argmax_last_dim(out.at("logits"));
        auto mask = sg::examples::addition_task::answer_mask(batch.at("input_ids"), batch.at("targets"));
        auto s = sg::data::accuracy(predicted, batch.at("targets").values<std::int64_t>(), mask);
        score.correct += s.correct;
        score.counted += s.counted;
      }
    auto params = rank.parameters();
    std::lock_guard lock(m);
    if (comm.rank() == 0) result.accuracy = score.value();
    sg::examples::add_slices(result.weights, params);
  });
  return result;
}

template <sg::dtype T, int Zero>
int run(const options& o) {
  static constexpr sg::program sharded = sg::compile<build<T, true>, sg::training{.zero_stage = Zero}>();
  static constexpr sg::program check_sharded =
      sg::compile<build<sg::dtype::f64, true>, sg::training{.zero_stage = Zero}>();
  static constexpr sg::program check_single = sg::compile<build<sg::dtype::f64, false>, sg::training{}>();
  const sg::models::gpt2_config c = model_config(o);
  std::printf(
      "train_gpt: GPT (%lld layers, model %lld, %lld heads) on the addition task, mesh %s (%d thread ranks), "
      "%s, ZeRO stage %d, recompute %s, batch %lld x seq %lld, %d steps\n",
      static_cast<long long>(c.layers), static_cast<long long>(c.model), static_cast<long long>(c.heads),
      o.mesh.to_string().c_str(), o.mesh.world_size(sharded.nodes.axes), o.precision.c_str(), Zero,
      o.recompute == sg::recompute::none   ? "none"
      : o.recompute == sg::recompute::full ? "full"
                                           : "attention",
      static_cast<long long>(o.batch), static_cast<long long>(o.seq), o.steps);
  // Recomputation, bucket size and overlap change what the executor does, not the program's
  // steps: set them on a copy.
  auto with_recompute = std::make_unique<sg::program>(sharded);
  with_recompute->recompute = o.recompute;
  with_recompute->bucket_bytes = static_cast<std::int64_t>(o.bucket_mb * 1024 * 1024);
  with_recompute->overlap_communication = o.overlap;
  run_result trained = train(*with_recompute, o, o.mesh, o.steps, true);
  std::printf("loss %.4f -> %.4f; held-out accuracy on answer digits: %.1f%%\n", trained.first_loss,
              trained.last_loss, 100.0 * trained.accuracy);

  // The layout check: 3 steps from the same weights and batches, on the mesh and on one rank, in f64.
  options check = o;
  auto check_with_recompute = std::make_unique<sg::program>(check_sharded);
  check_with_recompute->recompute = o.recompute;
  check_with_recompute->bucket_bytes = with_recompute->bucket_bytes;
  check_with_recompute->overlap_communication = o.overlap;
  run_result on_mesh = train(*check_with_recompute, check, o.mesh, 3, false);
  run_result on_one = train(check_single, check, sg::mesh_shape{}, 3, false);
  double difference = sg::examples::max_relative_difference(on_mesh.weights, on_one.weights);
  bool same = difference < 1e-9;
  std::printf(
      "%s: after 3 steps (f64) the %s layout's weights %s one rank's (max relative difference %.2e)\n",
      same ? "OK" : "FAILED", o.mesh.to_string().c_str(), same ? "equal" : "differ from", difference);
  bool learned = trained.accuracy >= o.require_accuracy && trained.last_loss <= o.require_loss;
  if (!learned)
    std::printf("FAILED: required held-out accuracy >= %.3f and final loss <= %.4f\n", o.require_accuracy,
                o.require_loss);
  return same && learned ? 0 : 1;
}

int usage(const std::string& why) {
  std::fprintf(
      stderr,
      "shardgraph: train_gpt: %s. usage: train_gpt [--mesh dp=2,tp=2] [--steps N] [--batch B] [--seq T] "
      "[--lr LR] [--precision f32|f64|bf16|fp16] [--zero 0|1|2|3] [--bucket-mb MB] [--overlap on|off] "
      "[--seed S]\n",
      why.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string_view a = argv[i];
      if (a == "--help" || a == "-h") {
        std::printf("see the comment at the top of examples/train_gpt/main.cpp for every option\n");
        return 0;
      }
      if (i + 1 >= argc) return usage("missing value after " + std::string(a));
      std::string v = argv[++i];
      if (a == "--mesh")
        o.mesh = sg::mesh_shape::parse(v);
      else if (a == "--steps")
        o.steps = std::stoi(v);
      else if (a == "--batch")
        o.batch = std::stoll(v);
      else if (a == "--seq")
        o.seq = std::stoll(v);
      else if (a == "--lr")
        o.lr = std::stod(v);
      else if (a == "--precision")
        o.precision = v;
      else if (a == "--zero")
        o.zero = std::stoi(v);
      else if (a == "--bucket-mb")
        o.bucket_mb = std::stod(v);
      else if (a == "--seed")
        o.seed = std::stoull(v);
      else if (a == "--require-accuracy")
        o.require_accuracy = std::stod(v);
      else if (a == "--require-loss")
        o.require_loss = std::stod(v);
      else if (a == "--check-finite")
        o.check_finite = v == "on";
      else if (a == "--overlap") {
        if (v != "on" && v != "off") return usage("--overlap must be on or off");
        o.overlap = v == "on";
      } else if (a == "--micro-batches")
        o.micro_batches = std::stoi(v);
      else if (a == "--layers")
        o.layers = std::stoi(v);
      else if (a == "--schedule")
        o.pipeline.schedule = sg::pipeline::parse_schedule(v);
      else if (a == "--virtual-stages")
        o.pipeline.virtual_stages = std::stoi(v);
      else if (a == "--stage-layers") {
        o.pipeline.stage_layers.clear();
        for (std::size_t at = 0; at <= v.size();) {
          const std::size_t comma = std::min(v.find(',', at), v.size());
          o.pipeline.stage_layers.push_back(std::stoll(v.substr(at, comma - at)));
          at = comma + 1;
        }
      } else if (a == "--recompute") {
        if (v == "none")
          o.recompute = sg::recompute::none;
        else if (v == "full")
          o.recompute = sg::recompute::full;
        else if (v == "attention")
          o.recompute = sg::recompute::attention;
        else
          return usage("--recompute must be none, full or attention");
      } else
        return usage("unknown option " + std::string(a));
    }
    if (o.steps < 1) return usage("--steps must be at least 1");
    const int pp = o.mesh.size("pp");
    if (o.micro_batches == 0) o.micro_batches = pp > 1 ? 2 * pp : 1;
    if (o.layers == 0) o.layers = pp > 2 ? 4 : 2;
    if (o.pipeline.schedule == sg::pipeline::schedule_kind::interleaved_1f1b &&
        o.pipeline.virtual_stages == 1)
      o.pipeline.virtual_stages = 2;
    if (o.micro_batches < 1) return usage("--micro-batches must be at least 1");
    if (o.layers < 1) return usage("--layers must be at least 1");
    if (o.zero < 0 || o.zero > 3)
      throw sg::error(sg::error_message("train_gpt --zero " + std::to_string(o.zero),
                                        "ZeRO stages are 0 to 3", "use --zero 0, 1, 2 or 3"));
    if (!(o.bucket_mb >= 0)) return usage("--bucket-mb must be 0 or more");
    auto by_stage = [&]<sg::dtype T>() {
      switch (o.zero) {
        case 0:
          return run<T, 0>(o);
        case 1:
          return run<T, 1>(o);
        case 2:
          return run<T, 2>(o);
        default:
          return run<T, 3>(o);
      }
    };
    if (o.precision == "f32") return by_stage.template operator()<sg::dtype::f32>();
    if (o.precision == "f64") return by_stage.template operator()<sg::dtype::f64>();
    if (o.precision == "bf16") return by_stage.template operator()<sg::dtype::bf16>();
    if (o.precision == "fp16") return by_stage.template operator()<sg::dtype::f16>();
    throw sg::error(sg::error_message("train_gpt --precision " + o.precision, "there is no such precision",
                                      "use --precision f32, f64, bf16 or fp16"));
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    return usage(e.what());
  }
}
