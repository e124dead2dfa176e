// Pipeline stages on thread ranks: the layer stack of a GPT-2 split over the `pp` axis, run by the
// GPipe, 1F1B and interleaved 1F1B schedules, alone and combined with dp, tp, ZeRO and
// recomputation, and with each rank given only its own rows of the micro-batches. After 3 AdamW
// steps every weight equals the one-rank run (f64, relative 1e-9).
// The tied embedding (wte: read by the first stage's embedding and the last stage's head) is
// held by both and stays identical on both.
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "tiny_gpt2_training.hpp"

namespace sg = shardgraph;

namespace {

using namespace tiny_gpt2;
using Mesh3 = sg::mesh<"dp", "tp", "pp">;

// 8 layers, so that 4 stages (or 2 ranks x 2 chunks) have layers to split; 24 rows divide into
// 2, 3, 4, 6 and 8 micro-batches.
const sg::models::gpt2_config deep{.vocab = 64, .positions = 16, .model = 32, .heads = 4, .layers = 8};
constexpr std::int64_t rows = 24;

const sg::program& program_of(bool sharded, int zero_stage = 0) {
  static std::map<std::pair<bool, int>, std::unique_ptr<sg::program>> cache;
  auto& p = cache[{sharded, zero_stage}];
  if (!p) {
    const sg::graph g =
        sharded ? sg::models::gpt2<Mesh3>({.type = sg::dtype::f64})
                : sg::models::gpt2<Mesh3>({.type = sg::dtype::f64, .data_axis = "", .tensor_axis = ""});
    p = std::make_unique<sg::program>(sg::compile_graph(g, sg::training{.zero_stage = zero_stage}));
    REQUIRE(p->ok());
  }
  return *p;
}

struct layout {
  int dp = 1, tp = 1, pp = 1;
};

struct run {
  weights trained;
  std::vector<double> losses;
};

// given: each rank passes the whole micro-batches, or only its own rows of them (io_part::local).
run train_pipeline(const sg::program& p, layout l, const sg::pipeline_options& pipe, int steps = 3,
                   sg::io_part given = sg::io_part::whole) {
  run result;
  std::mutex m;
  const int micro = pipe.micro_batches;
  sg::threads::world(l.dp * l.tp * l.pp).run([&](sg::threads::communicator& comm) {
    auto rank =
        sg::bind(p, deep.sizes(rows / micro, seq), comm, sg::cpu::backend{},
                 sg::mesh_shape{{"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}}, sg::random_weights(3, 0.3), pipe);
    sg::trainer t(rank, options);
    std::vector<double> losses;
    const std::int64_t part = rows / micro, mine = given == sg::io_part::local ? part / l.dp : part;
    const std::int64_t first = given == sg::io_part::local ? rank.coordinate("dp") * mine : 0;
    for (int s = 0; s < steps; ++s) {
      std::vector<sg::tensor_map> parts;
      for (int k = 0; k < micro; ++k) parts.push_back(tokens(mine, k * part + first, s));
      losses.push_back(t.step(parts, {.inputs = given}).loss);
    }
    auto params = rank.parameters();
    std::lock_guard lock(m);
    add_slices(params, result.trained);
    if (comm.rank() == 0) result.losses = losses;
  });
  return result;
}

const run& reference() {
  static const run r = train_pipeline(program_of(false), {}, {});
  return r;
}

void check_equal(const run& got) {
  CHECK(max_relative_difference(got.trained, reference().trained) < 1e-9);
  REQUIRE(got.losses.size() == reference().losses.size());
  for (std::size_t s = 0; s < got.losses.size(); ++s)
    CHECK(std::abs(got.losses[s] - reference().losses[s]) < 1e-12 * reference().losses[s]);
}

}  // namespace

TEST_CASE("pipeline: every schedule, stage count and micro-batch count trains like one rank",
          "[runtime][training][pipeline][threads]") {
  using sg::pipeline::schedule_kind;
  for (int pp : {2, 4})
    for (int micro : {pp, 2 * pp, 3}) {
      for (schedule_kind kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b}) {
        CAPTURE(pp, micro, sg::pipeline::schedule_name(kind));
        check_equal(train_pipeline(program_of(true), {.pp = pp}, {.schedule = kind, .micro_batches = micro}));
      }
      if (micro % pp == 0) {
        CAPTURE(pp, micro, "interleaved");
        check_equal(train_pipeline(
            program_of(true), {.pp = pp},
            {.schedule = schedule_kind::interleaved_1f1b, .micro_batches = micro, .virtual_stages = 2}));
      }
    }
}

TEST_CASE("pipeline: uneven stage splits train like one rank", "[runtime][training][pipeline][threads]") {
  using sg::pipeline::schedule_kind;
  for (const std::vector<std::int64_t>& split :
       {std::vector<std::int64_t>{1, 7}, {5, 3}, {1, 2, 4, 1}, {3, 1, 1, 3}}) {
    const int pp = static_cast<int>(split.size());
    CAPTURE(pp, split[0], split[1]);
    check_equal(
        train_pipeline(program_of(true), {.pp = pp},
                       {.schedule = schedule_kind::one_f_one_b, .micro_batches = 4, .stage_layers = split}));
  }
}

TEST_CASE("pipeline: dp x tp x pp layouts of up to 8 ranks with ZeRO and recomputation train like one rank",
          "[runtime][training][pipeline][threads]") {
  using sg::pipeline::schedule_kind;
  for (int zero : {0, 1, 2, 3})
    for (layout l : {layout{2, 1, 2}, layout{1, 2, 2}, layout{2, 2, 2}, layout{2, 1, 4}, layout{1, 2, 4},
                     layout{4, 1, 2}}) {
      CAPTURE(zero, l.dp, l.tp, l.pp);
      const int micro = l.dp == 4 ? 6 : 4;  // 4 rows per micro-batch split over dp = 4
      check_equal(train_pipeline(program_of(true, zero), l,
                                 {.schedule = schedule_kind::one_f_one_b, .micro_batches = micro}));
    }
  for (int zero : {1, 3})
    for (sg::recompute how : {sg::recompute::full, sg::recompute::attention}) {
      CAPTURE(zero, how == sg::recompute::full ? "full" : "attention");
      auto recompute = std::make_unique<sg::program>(program_of(true, zero));
      recompute->recompute = how;
      check_equal(train_pipeline(
          *recompute, {2, 2, 2},
          {.schedule = schedule_kind::interleaved_1f1b, .micro_batches = 4, .virtual_stages = 2}));
    }
}

TEST_CASE("pipeline: ranks given only their own rows of each micro-batch train like one rank",
          "[runtime][training][pipeline][threads]") {
  using sg::pipeline::schedule_kind;
  for (layout l : {layout{2, 1, 2}, layout{2, 2, 2}}) {
    CAPTURE(l.dp, l.tp, l.pp);
    check_equal(train_pipeline(program_of(true), l,
                               {.schedule = schedule_kind::one_f_one_b, .micro_batches = 4}, 3,
                               sg::io_part::local));
  }
}

TEST_CASE("pipeline: forward() for evaluation gives every rank the last stage's outputs",
          "[runtime][training][pipeline][threads]") {
  // After 2 steps, the logits and loss of a held-out micro-batch equal the one-rank run's (which
  // accumulated the same micro-batches), on every rank of the pipeline.
  constexpr int micro = 4;
  auto evaluate = [](const sg::program& p, layout l, const sg::pipeline_options& pipe) {
    std::vector<std::pair<double, std::vector<double>>> per_rank(
        static_cast<std::size_t>(l.dp * l.tp * l.pp));
    sg::threads::world(l.dp * l.tp * l.pp).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(p, deep.sizes(rows / micro, seq), comm, sg::cpu::backend{},
                           sg::mesh_shape{{"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}},
                           sg::random_weights(3, 0.3), pipe);
      sg::trainer t(rank, options);
      for (int s = 0; s < 2; ++s) {
        std::vector<sg::tensor_map> parts;
        for (int k = 0; k < micro; ++k) parts.push_back(tokens(rows / micro, k * (rows / micro), s));
        t.step(parts);
      }
      const sg::tensor_map out = rank.forward(tokens(rows / micro, 0, 7));
      std::vector<double> logits;
      for (std::int64_t i = 0; i < out.at("logits").numel(); ++i) logits.push_back(out.at("logits").at(i));
      per_rank[static_cast<std::size_t>(comm.rank())] = {out.at("loss").at(0), logits};
    });
    return per_rank;
  };
  const auto one = evaluate(program_of(false), {}, {});
  using sg::pipeline::schedule_kind;
  for (layout l : {layout{1, 1, 2}, layout{2, 2, 2}, layout{1, 1, 4}})
    for (int zero : {0, 3}) {
      CAPTURE(l.dp, l.tp, l.pp, zero);
      const auto got = evaluate(program_of(true, zero), l,
                                {.schedule = schedule_kind::one_f_one_b, .micro_batches = micro});
      for (const auto& [loss, logits] : got) {
        CHECK(std::abs(loss - one[0].first) < 1e-12 * one[0].first);
        REQUIRE(logits.size() == one[0].second.size());
        double worst = 0;
        for (std::size_t i = 0; i < logits.size(); ++i)
          worst = std::max(worst, std::abs(logits[i] - one[0].second[i]));
        CHECK(worst < 1e-10);
      }
    }
}

TEST_CASE("pipeline: 1F1B keeps at most pp micro-batches in flight, GPipe all of them",
          "[runtime][training][pipeline][threads]") {
  using sg::pipeline::schedule_kind;
  struct stage_memory {
    int planned = 0, observed = 0;
    std::int64_t activations = 0;  // bytes, every slot together
    std::int64_t per_slot = 0;     // bytes each further slot adds
  };
  // Binds 4 stages, runs one training step and reads each stage's plan and what the step used.
  auto in_flight = [](const sg::pipeline_options& pipe) {
    std::vector<stage_memory> stages(4);
    const int micro = pipe.micro_batches;
    sg::threads::world(4).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(program_of(true), deep.sizes(rows / micro, seq), comm, sg::cpu::backend{},
                           sg::mesh_shape{{"pp", 4}}, sg::random_weights(), pipe);
      sg::trainer t(rank, options);
      std::vector<sg::tensor_map> parts;
      for (int k = 0; k < micro; ++k) parts.push_back(tokens(rows / micro, k * (rows / micro), 0));
      t.step(parts);
      stages[static_cast<std::size_t>(comm.rank())] = {
          rank.memory().micro_batches_in_flight, rank.observed_micro_batches_in_flight(),
          rank.memory().activations, rank.memory().activations_per_micro_batch};
    });
    return stages;
  };
  const auto one_f_one_b = in_flight({.schedule = schedule_kind::one_f_one_b, .micro_batches = 8});
  const auto gpipe = in_flight({.schedule = schedule_kind::gpipe, .micro_batches = 8});
  const auto interleaved =
      in_flight({.schedule = schedule_kind::interleaved_1f1b, .micro_batches = 8, .virtual_stages = 2});
  for (int s = 0; s < 4; ++s) {
    const auto i = static_cast<std::size_t>(s);
    CAPTURE(s);
    CHECK(one_f_one_b[i].planned == 4 - s);  // stage s: pp - s
    CHECK(gpipe[i].planned == 8);
    CHECK(interleaved[i].planned <= 8);
    // The step used exactly the slots bind planned for.
    CHECK(one_f_one_b[i].observed == one_f_one_b[i].planned);
    CHECK(gpipe[i].observed == gpipe[i].planned);
    CHECK(interleaved[i].observed == interleaved[i].planned);
    // Activation bytes grow by one slot's copy per micro-batch in flight: GPipe's stage s keeps
    // 8 - (4 - s) more than 1F1B's. A slot holds the kept activations, not every value.
    CHECK(one_f_one_b[i].per_slot == gpipe[i].per_slot);
    CHECK(gpipe[i].activations - one_f_one_b[i].activations == (8 - (4 - s)) * gpipe[i].per_slot);
    CHECK(gpipe[i].per_slot > 0);
    CHECK(gpipe[i].per_slot < gpipe[i].activations / 8);
  }
}

TEST_CASE("pipeline: bad splits, schedules and micro-batch counts fail at bind or step, on every rank",
          "[runtime][training][pipeline][threads]") {
  using sg::pipeline::schedule_kind;
  auto error_at_bind = [](const sg::program& p, int pp, const sg::pipeline_options& pipe) {
    std::vector<std::string> messages(static_cast<std::size_t>(pp));
    sg::threads::world(pp).run([&](sg::threads::communicator& comm) {
      messages[static_cast<std::size_t>(comm.rank())] = sg::testing::error_of([&] {
        auto rank = sg::bind(p, deep.sizes(rows / pipe.micro_batches, seq), comm, sg::cpu::backend{},
                             sg::mesh_shape{{"pp", pp}}, sg::random_weights(), pipe);
      });
    });
    for (const std::string& m : messages) CHECK(m == messages[0]);  // identical on every rank
    return messages[0];
  };
  CHECK(sg::testing::contains(
      error_at_bind(program_of(true), 2, {.micro_batches = 2, .stage_layers = {3, 3}}), "sum"));
  CHECK(sg::testing::contains(error_at_bind(program_of(true), 4, {.micro_batches = 4, .stage_layers = {8}}),
                              "stage"));
  CHECK(sg::testing::contains(
      error_at_bind(program_of(true), 4,
                    {.schedule = schedule_kind::interleaved_1f1b, .micro_batches = 4, .virtual_stages = 3}),
      "stages"));  // 12 virtual stages for 8 layers
  // A step with another number of micro-batches than bound for.
  std::vector<std::string> messages(2);
  sg::threads::world(2).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(program_of(true), deep.sizes(rows / 4, seq), comm, sg::cpu::backend{},
                         sg::mesh_shape{{"pp", 2}}, sg::random_weights(), {.micro_batches = 4});
    sg::trainer t(rank, options);
    messages[static_cast<std::size_t>(comm.rank())] =
        sg::testing::error_of([&] { t.step(tokens(rows / 4, 0, 0)); });
  });
  CHECK(messages[0] == messages[1]);
  CHECK(sg::testing::contains(messages[0], "1 micro-batches for a pipeline bound for 4"));
}
