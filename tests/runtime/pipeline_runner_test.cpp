// runtime/pipeline_runner.hpp against a recording stand-in for the executor and the communicator:
// which slot each action runs in, what each segment runs, and the tags and peers of the boundary
// transfers, for two stages of 1F1B over two micro-batches (the schedule drawn at the top of
// pipeline/schedule.hpp) and for the stage-by-stage forward.
#include <shardgraph/runtime/pipeline_runner.hpp>

#include <map>
#include <span>
#include <string>
#include <vector>

#include "../plan/test_programs.hpp"
#include "catch.hpp"

namespace {

namespace sg = shardgraph;

struct fake_buffer {
  std::vector<float> data = std::vector<float>(2, 0.0f);
};

// Records what the runner asks: one line per call.
struct fake_stage {
  using buffer = fake_buffer;
  std::vector<std::string> calls;
  std::map<int, fake_buffer> values;
  int bank = -1;

  void select_bank(int k) {
    if (k != bank) calls.push_back("bank " + std::to_string(k));
    bank = k;
  }
  fake_buffer& value(int i) { return values[i]; }
  fake_buffer& value_at(int i, std::int64_t) { return values[i]; }
  fake_buffer& output_value(int i) { return values[i]; }
  void upload_inputs(const std::string& batch) { calls.push_back("upload " + batch); }
  std::map<std::string, std::vector<double>> outputs(std::string_view only) {
    return {{std::string(only), {1.5 + bank}}};
  }
  void run_segment(const sg::step_segment& s) {
    std::string t = "run";
    if (s.pre) t += " pre";
    if (s.forward_block) t += " block";
    if (s.post) t += " post";
    if (s.backward_block) t += " backward";
    if (s.tail) t += " tail";
    if (s.zero_tail_input) t += " (zero)";
    calls.push_back(t + " [" + std::to_string(s.first_layer) + ", " + std::to_string(s.end_layer) + ")");
  }
  void restore_outputs(const std::map<std::string, std::vector<double>>& kept) {
    calls.push_back("restore " + kept.begin()->first);
  }
  void copy(fake_buffer&, fake_buffer&) { calls.push_back("copy inbox"); }
  template <class Fn>
  void with_span(fake_buffer& b, Fn&& fn) {
    fn(std::span<float>(b.data));
  }
  void gather_unlayered_parameters() { calls.push_back("gather"); }
  void release_unlayered_parameters() { calls.push_back("release"); }
};

struct fake_comm {
  std::vector<std::string>& calls;
  void send(std::span<const float>, int peer, int tag) {
    calls.push_back("send " + std::to_string(tag) + " -> " + std::to_string(peer));
  }
  void recv(std::span<float>, int peer, int tag) {
    calls.push_back("recv " + std::to_string(tag) + " <- " + std::to_string(peer));
  }
  void broadcast(std::span<double> v, int root) {
    calls.push_back("broadcast " + std::to_string(v.size()) + " doubles from " + std::to_string(root));
  }
  void broadcast(std::span<float> v, int root) {
    calls.push_back("broadcast " + std::to_string(v.size()) + " floats from " + std::to_string(root));
  }
};

struct rank_plan {
  sg::plan::step_index idx;
  sg::plan::pipeline_stages stages;
};
// 4 layers on 2 stages, 1F1B over 2 micro-batches.
rank_plan plan_of(int rank, const sg::program& p = plan_test_programs::untied) {
  rank_plan r;
  r.idx = sg::plan::index_steps(p, 4);
  r.stages = sg::plan::plan_pipeline_stages(p, r.idx, {.micro_batches = 2}, 2, rank);
  return r;
}

// What each of the two stages asks of its stage and communicator while `run(stage, pp, plan)` runs.
template <class Run>
std::vector<std::vector<std::string>> calls_per_stage(Run run) {
  std::vector<std::vector<std::string>> calls;
  for (int rank : {0, 1}) {
    const rank_plan r = plan_of(rank);
    fake_stage stage;
    fake_comm pp{stage.calls};
    run(stage, pp, r);
    calls.push_back(stage.calls);
  }
  return calls;
}

std::vector<std::string> run_step(int rank, std::vector<double>& losses, int& observed,
                                  const sg::program& p = plan_test_programs::untied) {
  const rank_plan r = plan_of(rank, p);
  fake_stage stage;
  fake_comm pp{stage.calls};
  std::vector<fake_buffer> inbox(static_cast<std::size_t>(r.stages.inbox));
  const std::vector<std::string> batches{"m0", "m1"};
  losses = sg::run_pipeline_step(stage, pp, r.stages, r.idx, std::span<const std::string>(batches), inbox,
                                 observed);
  return stage.calls;
}

}  // namespace

TEST_CASE("run_pipeline_step: 1F1B on two stages, each micro-batch in its slot", "[runtime][pipeline]") {
  // Tags: (m * stages + j) * 2, + 2 for an activation to stage j + 1, - 1 for a gradient to j - 1.
  std::vector<double> losses;
  int observed = 0;
  // Stage 0 runs F0 F1 before its first backward: two slots.
  CHECK(run_step(0, losses, observed) == std::vector<std::string>{
                                             "gather",
                                             "bank 0",
                                             "upload m0",
                                             "run pre block [0, 2)",
                                             "send 2 -> 1",
                                             "bank 1",
                                             "upload m1",
                                             "run pre block [0, 2)",
                                             "send 6 -> 1",
                                             "bank 0",
                                             "recv 1 <- 1",
                                             "run backward tail [0, 2)",
                                             "bank 1",
                                             "recv 5 <- 1",
                                             "run backward tail [0, 2)",
                                             "release",
                                             "broadcast 2 doubles from 1",
                                         });
  CHECK(observed == 2);
  CHECK(losses == std::vector<double>{0.0, 0.0});  // the last stage's, broadcast by the communicator
  // Stage 1 runs each micro-batch's forward (with the head) and backward in turn: one slot, and
  // an activation received while its slot's micro-batch is still running waits in the inbox.
  observed = 0;
  CHECK(run_step(1, losses, observed) == std::vector<std::string>{
                                             "gather",
                                             "recv 2 <- 0",
                                             "bank 0",
                                             "copy inbox",
                                             "upload m0",
                                             "run block post [2, 4)",
                                             "recv 6 <- 0",
                                             "run backward [2, 4)",
                                             "send 1 -> 0",
                                             "copy inbox",
                                             "upload m1",
                                             "run block post [2, 4)",
                                             "run backward [2, 4)",
                                             "send 5 -> 0",
                                             "release",
                                             "broadcast 2 doubles from 1",
                                         });
  CHECK(observed == 1);
  CHECK(losses == std::vector<double>{1.5, 1.5});  // outputs("loss") read in slot 0
}

TEST_CASE("run_pipeline_step: a tied last stage runs the tail from zero in each forward action",
          "[runtime][pipeline]") {
  std::vector<double> losses;
  int observed = 0;
  const std::vector<std::string> calls = run_step(1, losses, observed, plan_test_programs::tied);
  std::vector<std::string> runs;
  for (const std::string& c : calls)
    if (c.starts_with("run")) runs.push_back(c);
  CHECK(runs == std::vector<std::string>{"run block post [2, 4)", "run tail (zero) [0, -1)",
                                         "run backward [2, 4)", "run block post [2, 4)",
                                         "run tail (zero) [0, -1)", "run backward [2, 4)"});
}

TEST_CASE("forward_stage_by_stage: each stage in order, outputs broadcast from the last",
          "[runtime][pipeline]") {
  const sg::graph& g = plan_test_programs::untied.nodes;
  const auto calls = calls_per_stage([&](fake_stage& stage, fake_comm& pp, const rank_plan& r) {
    sg::forward_stage_by_stage(stage, pp, r.stages, r.idx, g, std::string("batch"));
  });
  // The program has one output, the loss. Stage j sends its block's result with tag j + 1.
  CHECK(calls[0] == std::vector<std::string>{"bank 0", "upload batch", "gather", "run pre block [0, 2)",
                                             "send 1 -> 1", "release", "broadcast 2 floats from 1"});
  CHECK(calls[1] == std::vector<std::string>{"bank 0", "upload batch", "gather", "recv 1 <- 0",
                                             "run block post [2, 4)", "release",
                                             "broadcast 2 floats from 1"});
}

TEST_CASE("forward_micro_batches: a stage runs the micro-batches in turn, outputs sent at the end",
          "[runtime][pipeline]") {
  const sg::graph& g = plan_test_programs::untied.nodes;
  const std::vector<std::string> batches{"m0", "m1", "m2"};
  const auto calls = calls_per_stage([&](fake_stage& stage, fake_comm& pp, const rank_plan& r) {
    const auto outputs =
        sg::forward_micro_batches(stage, pp, r.stages, r.idx, g, std::span<const std::string>(batches), "loss");
    REQUIRE(outputs.size() == 3);
  });
  // Stage 0 sends micro-batch m's block result (tag 2m + 1) and goes on to m + 1 without waiting
  // for stage 1; the last stage keeps each one's outputs and sends them once all have run.
  CHECK(calls[0] == std::vector<std::string>{"bank 0", "gather", "upload m0", "run pre block [0, 2)", "send 1 -> 1",
                                             "upload m1", "run pre block [0, 2)", "send 3 -> 1", "upload m2",
                                             "run pre block [0, 2)", "send 5 -> 1", "release",
                                             "broadcast 2 floats from 1", "broadcast 2 floats from 1",
                                             "broadcast 2 floats from 1"});
  CHECK(calls[1] == std::vector<std::string>{"bank 0", "gather", "upload m0", "recv 1 <- 0", "run block post [2, 4)",
                                             "upload m1", "recv 3 <- 0", "run block post [2, 4)", "upload m2",
                                             "recv 5 <- 0", "run block post [2, 4)", "release", "restore loss",
                                             "broadcast 2 floats from 1", "restore loss",
                                             "broadcast 2 floats from 1", "restore loss",
                                             "broadcast 2 floats from 1"});
}
