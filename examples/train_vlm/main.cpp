// train_vlm: trains a small LLaVA-style vision-language model (models::llava: a CLIP vision tower,
// a projector and a LLaMA decoder) on the built-in shapes task over thread ranks, then reports its
// held-out accuracy on the answers and checks that the layout trains exactly like one rank.
//
//   train_vlm [--mesh dp=2,tp=2] [--steps 1000] [--batch 32] [--lr 3e-3] [--seed 1]
//             [--held-out 512]            held-out examples scored at the end
//             [--require-accuracy A]      exit 1 unless held-out accuracy >= A
//             [--require-loss L]          exit 1 unless the final loss <= L
//
//   shapes task --global batch--> pixel_values (batch, 3, 16, 16), input_ids and targets (batch, 17)
//     --dp--> ranks (dp=i, tp=j): vision tower (16 patches + class token; q, k, v, fc1 column and
//             o, fc2 row parallel on tp) --> projector --> image features replace the 16 image
//             tokens' embeddings --> LLaMA decoder (Megatron's layout on tp) --> logits (batch, 17, vocab)
//     --> loss on the answer position only --> global-norm clip --> AdamW on each rank's slice
//
// Each example is an image of 1 to 3 shapes of one colour and a question, "count" or "colour"; the
// answer is one word ("two", "blue"); chance is 1/3 on count and 1/4 on colour. The held-out
// scenes are never trained on (examples/common/shapes_task.hpp). After training it draws the first
// four held-out images as text with the model's answers, then prints the accuracy per question.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "shapes_task.hpp"
#include "whole_parameters.hpp"

namespace sg = shardgraph;
using sg::examples::shapes_task;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr std::int64_t vision_layers = 2;  // unrolled: the tower's layers are part of the graph

// The tower and the projector tensor parallel on tp as the decoder (Sharded), or one rank's model.
template <sg::dtype T, bool Sharded>
constexpr auto build() {
  sg::models::llava_options o{.type = T, .vision = sg::models::llava_vision_tower(vision_layers)};
  o.vision.tensor_axis = Sharded ? "tp" : "";
  o.text = {.type = T, .data_axis = Sharded ? "dp" : "", .tensor_axis = Sharded ? "tp" : ""};
  return sg::models::llava<Mesh>(o);
}

struct options {
  sg::mesh_shape mesh = sg::mesh_shape::parse("dp=2,tp=2");
  int steps = 1000;
  std::int64_t batch = 32, held_out = 512;
  double lr = 3e-3;
  std::uint64_t seed = 1;
  double require_accuracy = 0, require_loss = 1e30;
};

// A 16 x 16 image in 4 x 4 patches; the decoder's vocabulary of 11 words padded to 16 rows. Heads,
// widths and rows divide over tp = 1, 2 and 4.
sg::models::llava_config model_config() {
  return {.vision = {.image_size = 16, .patch_size = 4, .channels = 3, .model = 32, .heads = 4,
                     .layers = vision_layers, .ffn = 64, .labels = 0},
          .text = {.vocab = shapes_task::vocab_size, .model = 32, .ffn = 64, .heads = 4, .kv_heads = 4,
                   .layers = 1, .padded_vocab = 16}};
}

shapes_task task_of(const options& o) { return {.image_size = 16, .patch_size = 4, .seed = o.seed}; }

struct run_result {
  sg::examples::whole_tensors weights;
  double first_loss = 0, last_loss = 0;
  sg::data::accuracy_count count, colour;  // held-out answers to each question
};

// The word predicted at the answer position of each row: the argmax over the vocabulary's words
// (the padded rows of the head are not words).
std::vector<std::int64_t> predicted_answers(const sg::host_tensor& logits, const shapes_task& task) {
  const std::int64_t rows = logits.shape()[0], seq = logits.shape()[1], vocab = logits.shape()[2];
  std::vector<std::int64_t> words(static_cast<std::size_t>(rows));
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::int64_t at = (row * seq + task.answer_position()) * vocab;
    std::int64_t best = 0;
    for (std::int64_t v = 1; v < shapes_task::vocab_size; ++v)
      if (logits.at(at + v) > logits.at(at + best)) best = v;
    words[static_cast<std::size_t>(row)] = best;
  }
  return words;
}

// Scores the predicted words against the targets, per question.
void score_answers(const std::vector<std::int64_t>& predicted, const sg::tensor_map& batch, const shapes_task& task,
                   run_result& r) {
  const auto ids = batch.at("input_ids").values<std::int64_t>();
  const auto targets = batch.at("targets").values<std::int64_t>();
  for (std::size_t row = 0; row < predicted.size(); ++row) {
    const auto at = row * static_cast<std::size_t>(task.seq()) + static_cast<std::size_t>(task.answer_position());
    sg::data::accuracy_count& score = ids[at] == shapes_task::count_token ? r.count : r.colour;
    ++score.counted;
    if (predicted[row] == targets[at]) ++score.correct;
  }
}

// The first held-out examples side by side: each image's bright pixels as the letter of their
// colour (R, G, B, Y), then for each the question, the predicted word and the answer.
void show_examples(const shapes_task& task, const std::vector<std::int64_t>& predicted, int count) {
  std::vector<std::vector<double>> images;
  for (int i = 0; i < count; ++i) images.push_back(task.render(task.example_at(i, true)));
  const std::int64_t side = task.image_size, area = side * side;
  for (std::int64_t y = 0; y < side; ++y) {
    for (const std::vector<double>& image : images) {
      if (&image != &images.front()) std::printf("   ");
      for (std::int64_t x = 0; x < side; ++x) {
        auto lit = [&](int c) { return image[static_cast<std::size_t>(c * area + y * side + x)] > 0.5; };
        std::putchar(lit(0) && lit(1) ? 'Y' : lit(0) ? 'R' : lit(1) ? 'G' : lit(2) ? 'B' : '.');
      }
    }
    std::printf("\n");
  }
  for (int i = 0; i < count; ++i) {
    const shapes_task::example e = task.example_at(i, true);
    std::printf("held-out image %d: %s? predicted \"%s\", answer \"%s\"\n", i + 1,
                std::string(shapes_task::word(e.question_token())).c_str(),
                std::string(shapes_task::word(predicted[static_cast<std::size_t>(i)])).c_str(),
                std::string(shapes_task::word(e.answer())).c_str());
  }
}

sg::training_options training_of(const options& o, int steps) {
  return {.adamw = {.lr = o.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.01},
          .schedule = sg::warmup_cosine{.max_lr = o.lr,
                                        .min_lr = o.lr / 10,
                                        .warmup_steps = std::max(1, steps / 20),
                                        .total_steps = steps},
          .max_grad_norm = 1.0};
}

// Trains `steps` steps of program p on the mesh from seeded random weights; prints progress when
// `verbose`; scores the held-out examples when `evaluate`. Returns the whole weights and the scores.
// `pixels`: the program's dtype.
run_result train(const sg::program_view& p, sg::dtype pixels, const options& o, const sg::mesh_shape& mesh, int steps,
                 bool verbose, bool evaluate) {
  const shapes_task task = task_of(o);
  run_result result;
  std::mutex m;
  sg::threads::world(mesh.world_size(p.nodes.axes)).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, model_config().sizes(o.batch, task.seq()), comm, sg::cpu::backend{}, mesh,
                         sg::random_weights(o.seed, 0.1));
    sg::trainer trainer(rank, training_of(o, steps));
    const auto start = std::chrono::steady_clock::now();
    for (int s = 1; s <= steps; ++s) {
      // every rank builds the same global batch; each computes on its dp slice of the rows
      const sg::step_report r = trainer.step(task.batch((s - 1) * o.batch, o.batch, false, pixels));
      if (s == 1) result.first_loss = r.loss;
      result.last_loss = r.loss;
      if (verbose && comm.rank() == 0 && (s == 1 || s % 25 == 0 || s == steps)) {
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("step %4d/%d | loss %.4f | grad norm %6.3f | lr %.2e | %5.1f s\n", s, steps, r.loss,
                    r.grad_norm, r.lr, elapsed);
        std::fflush(stdout);
      }
    }
    run_result scores;
    for (std::int64_t first = 0; evaluate && first + o.batch <= o.held_out; first += o.batch) {
      const sg::tensor_map batch = task.batch(first, o.batch, true, pixels);
      const std::vector<std::int64_t> predicted = predicted_answers(rank.forward(batch).at("logits"), task);
      score_answers(predicted, batch, task, scores);
      if (verbose && comm.rank() == 0 && first == 0) show_examples(task, predicted, std::min<int>(4, o.batch));
    }
    auto params = rank.parameters();
    std::lock_guard lock(m);
    if (comm.rank() == 0) {
      result.count = scores.count;
      result.colour = scores.colour;
    }
    sg::examples::add_slices(result.weights, params);
  });
  return result;
}

int run(const options& o) {
  static constexpr auto sharded = sg::compile<build<sg::dtype::f32, true>, sg::training{}>();
  static constexpr auto check_sharded = sg::compile<build<sg::dtype::f64, true>, sg::training{}>();
  static constexpr auto check_single = sg::compile<build<sg::dtype::f64, false>, sg::training{}>();
  const sg::models::llava_config c = model_config();
  std::printf("train_vlm: LLaVA (vision tower %lld layers x %lld wide, decoder %lld layer x %lld wide) on the "
              "shapes task, mesh %s (%d thread ranks), f32, batch %lld, %d steps\n",
              static_cast<long long>(vision_layers), static_cast<long long>(c.vision.model),
              static_cast<long long>(c.text.layers), static_cast<long long>(c.text.model),
              o.mesh.to_string().c_str(), o.mesh.world_size(sharded.nodes.axes), static_cast<long long>(o.batch),
              o.steps);
  const run_result trained = train(sharded, sg::dtype::f32, o, o.mesh, o.steps, true, true);
  const sg::data::accuracy_count all{trained.count.correct + trained.colour.correct,
                                     trained.count.counted + trained.colour.counted};
  std::printf("loss %.4f -> %.4f; held-out accuracy %.1f%% of %lld (count %.1f%%, colour %.1f%%)\n",
              trained.first_loss, trained.last_loss, 100.0 * all.value(), static_cast<long long>(all.counted),
              100.0 * trained.count.value(), 100.0 * trained.colour.value());

  // The layout check: 3 steps from the same weights and batches, on the mesh and on one rank, in f64.
  const double difference = sg::examples::max_relative_difference(
      train(check_sharded, sg::dtype::f64, o, o.mesh, 3, false, false).weights,
      train(check_single, sg::dtype::f64, o, sg::mesh_shape{}, 3, false, false).weights);
  const bool same = difference < 1e-9;
  std::printf("%s: after 3 steps (f64) the %s layout's weights %s one rank's (max relative difference %.2e)\n",
              same ? "OK" : "FAILED", o.mesh.to_string().c_str(), same ? "equal" : "differ from", difference);
  const bool accurate = all.value() >= o.require_accuracy, low_loss = trained.last_loss <= o.require_loss;
  if (!accurate) std::printf("FAILED: held-out accuracy below the required %.3f\n", o.require_accuracy);
  if (!low_loss) std::printf("FAILED: final loss above the required %.4f\n", o.require_loss);
  const bool learned = accurate && low_loss;
  return same && learned ? 0 : 1;
}

int usage(const std::string& why) {
  std::fprintf(stderr,
               "shardgraph: train_vlm: %s. usage: train_vlm [--mesh dp=2,tp=2] [--steps N] [--batch B] [--lr LR] "
               "[--seed S] [--held-out N] [--require-accuracy A] [--require-loss L]\n",
               why.c_str());
  return 2;
}

// Reads "--flag value" pairs into o; returns the reason when the command line is wrong.
std::string parse(int argc, char** argv, options& o) {
  const std::map<std::string_view, std::function<void(const std::string&)>> flags{
      {"--mesh", [&](const std::string& v) { o.mesh = sg::mesh_shape::parse(v); }},
      {"--steps", [&](const std::string& v) { o.steps = std::stoi(v); }},
      {"--batch", [&](const std::string& v) { o.batch = std::stoll(v); }},
      {"--lr", [&](const std::string& v) { o.lr = std::stod(v); }},
      {"--seed", [&](const std::string& v) { o.seed = std::stoull(v); }},
      {"--held-out", [&](const std::string& v) { o.held_out = std::stoll(v); }},
      {"--require-accuracy", [&](const std::string& v) { o.require_accuracy = std::stod(v); }},
      {"--require-loss", [&](const std::string& v) { o.require_loss = std::stod(v); }}};
  for (int i = 1; i < argc; i += 2) {
    const auto flag = flags.find(argv[i]);
    if (flag == flags.end()) return "unknown option " + std::string(argv[i]);
    if (i + 1 >= argc) return "missing value after " + std::string(argv[i]);
    flag->second(argv[i + 1]);
  }
  if (o.steps < 1) return "--steps must be at least 1";
  if (o.batch < 1 || o.held_out < o.batch) return "--batch must be at least 1 and at most --held-out";
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
    std::printf("see the comment at the top of examples/train_vlm/main.cpp for every option\n");
    return 0;
  }
  try {
    options o;
    if (const std::string wrong = parse(argc, argv, o); !wrong.empty()) return usage(wrong);
    return run(o);
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    return usage(e.what());
  }
}
