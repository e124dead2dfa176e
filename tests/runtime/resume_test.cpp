// Training checkpoints (issue 6): a run killed with SIGKILL resumes from its last complete
// checkpoint (weights, AdamW's moments, the step counters and the data position) and continues with
// the loss curve of a run never interrupted; a checkpoint saved under one layout and ZeRO stage
// resumes under another.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <shardgraph/io/training_checkpoint.hpp>

#include "support/cpu_threads_rank_program.hpp"
#include "tiny_gpt2_training.hpp"

namespace sg = shardgraph;

namespace {

using namespace tiny_gpt2;

constexpr sg::graph gpt2_sharded() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::program plain = sg::compile<gpt2_sharded, sg::training{}>();
constexpr sg::program zero1 = sg::compile<gpt2_sharded, sg::training{.zero_stage = 1}>();
constexpr sg::program zero3 = sg::compile<gpt2_sharded, sg::training{.zero_stage = 3}>();

struct run_layout {
  const sg::program* program;
  int dp, tp;
};

// The latest step-<k> directory with a manifest (a complete checkpoint), or "" when none.
std::string latest_checkpoint(const std::filesystem::path& dir) {
  std::string best;
  long best_step = -1;
  if (!std::filesystem::exists(dir)) return best;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 ||
        !std::filesystem::exists(entry.path() / sg::io::sharded_weights_manifest))
      continue;
    const long step = std::stol(name.substr(5));
    if (step > best_step) best_step = step, best = entry.path().string();
  }
  return best;
}

// Trains up to step `last` (1-based) on `l`, saving a checkpoint into dir/step-<k> after every
// `every`-th step, starting from `resume` (a checkpoint directory) when given. Returns rank 0's loss
// per step it ran, by step. With `kill_after`, the process SIGKILLs itself after that step's update.
std::map<int, double> train_and_save(run_layout l, int last, int every, const std::filesystem::path& dir,
                                     const std::string& resume = "", int kill_after = -1) {
  std::map<int, double> losses;
  sg::threads::world(l.dp * l.tp).run([&](sg::threads::communicator& comm) {
    const sg::weight_source weights =
        resume.empty() ? sg::random_weights(3, 0.3) : sg::io::sharded_weights(resume);
    auto rank = sg::bind(*l.program, config.sizes(batch, seq), comm, sg::cpu::backend{},
                         sg::mesh_shape{{"dp", l.dp}, {"tp", l.tp}}, weights);
    sg::trainer t(rank, options);
    int first = 1;
    if (!resume.empty()) first = static_cast<int>(sg::io::resume_training(resume, t).position) + 1;
    for (int step = first; step <= last; ++step) {
      // every rank is given the whole batch; each dp rank computes on its rows of it
      const sg::step_report r = t.step(tokens(batch, 0, step));
      if (comm.rank() == 0) losses[step] = r.loss;
      if (step == kill_after && comm.rank() == 0) std::raise(SIGKILL);  // kill -9, mid-run
      if (step % every == 0)
        sg::io::save_training_checkpoint((dir / ("step-" + std::to_string(step))).string(), t, comm,
                                         {.position = step});
    }
  });
  return losses;
}

std::filesystem::path scratch(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("shardgraph-resume-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("a run killed with SIGKILL resumes from its last checkpoint with the uninterrupted loss curve",
          "[runtime][checkpoint][threads]") {
  const run_layout layout{&zero1, 2, 2};
  const std::map<int, double> uninterrupted = train_and_save(layout, 7, 100, scratch("unused"));
  const auto dir = scratch("killed");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // checkpoints after steps 2 and 4, killed after step 5
    train_and_save(layout, 7, 2, dir, "", 5);
    std::_Exit(0);  // not reached: SIGKILL first
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  const std::string last = latest_checkpoint(dir);
  REQUIRE(last == (dir / "step-4").string());
  const std::map<int, double> resumed = train_and_save(layout, 7, 100, dir, last);
  REQUIRE(resumed.size() == 3);  // steps 5, 6, 7
  for (const auto& [step, loss] : resumed) {
    CAPTURE(step);
    CHECK(loss == uninterrupted.at(step));  // f64, the same operations in the same order
  }
  std::filesystem::remove_all(dir.parent_path());
}

TEST_CASE("a training checkpoint saved under one layout and ZeRO stage resumes under another",
          "[runtime][checkpoint][threads]") {
  const std::map<int, double> uninterrupted = train_and_save({&plain, 1, 1}, 5, 100, scratch("unused"));
  const auto dir = scratch("resharded");
  train_and_save({&zero1, 2, 2}, 3, 3, dir);  // saved after step 3 on dp=2 x tp=2, ZeRO-1
  for (const run_layout resume_on :
       {run_layout{&plain, 1, 1}, run_layout{&zero3, 2, 1}, run_layout{&plain, 1, 4}}) {
    CAPTURE(resume_on.dp, resume_on.tp);
    const std::map<int, double> resumed = train_and_save(resume_on, 5, 100, dir, (dir / "step-3").string());
    REQUIRE(resumed.size() == 2);
    for (const auto& [step, loss] : resumed)
      CHECK(std::abs(loss - uninterrupted.at(step)) <= 1e-10 * std::abs(uninterrupted.at(step)));
  }
  std::filesystem::remove_all(dir.parent_path());
}

TEST_CASE("a mixed-precision run resumes with its f32 master weights and the same loss curve",
          "[runtime][checkpoint][threads]") {
  // bf16 weights, f32 master weights and moments, ZeRO-1 over dp: the "#master" slices must be saved
  static const sg::program bf16_zero1 =
      sg::compile_graph(sg::models::gpt2<Mesh>({.type = sg::dtype::bf16}), sg::training{.zero_stage = 1});
  const run_layout layout{&bf16_zero1, 2, 1};
  const std::map<int, double> uninterrupted = train_and_save(layout, 5, 100, scratch("unused"));
  const auto dir = scratch("bf16");
  train_and_save(layout, 3, 3, dir);
  const sg::io::sharded_weights_index saved((dir / "step-3").string());
  CHECK(saved.pieces("h.0.mlp.c_fc.weight#master").size() == 1);  // one copy: the dp replica is not written
  const std::map<int, double> resumed = train_and_save(layout, 5, 100, dir, (dir / "step-3").string());
  REQUIRE(resumed.size() == 2);
  for (const auto& [step, loss] : resumed) {
    CAPTURE(step);
    CHECK(loss == uninterrupted.at(step));
  }
  std::filesystem::remove_all(dir.parent_path());
}

TEST_CASE("resuming training from a weights-only checkpoint is refused", "[runtime][checkpoint][threads]") {
  const auto dir = scratch("weights-only");
  CHECK_THROWS_WITH(sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(plain, config.sizes(batch, seq), comm, sg::cpu::backend{},
                         sg::mesh_shape{{"dp", 1}, {"tp", 1}}, sg::random_weights(3, 0.3));
    sg::io::save_weights(dir.string(), rank.parameters(), comm);
    sg::trainer t(rank, options);
    sg::io::resume_training(dir.string(), t);
  }),
                    Catch::Contains("without training state"));
  std::filesystem::remove_all(dir.parent_path());
}
