// The loss is torch's F.cross_entropy on every layout: targets equal to the ignore index (-100) are
// left out of the sum and of the mean's divisor, over the whole step (data-parallel ranks,
// micro-batches, pipeline micro-batches); a vocabulary padded so that it divides over tp leaves
// its padding out of the softmax and gives it no gradient. On thread ranks, f64, relative 1e-9
// against one rank with the unpadded vocabulary. And the token ids and targets are checked against
// the vocabulary before any compute, with one error on every rank.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/trainer.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp", "pp">;

// 61 tokens: no tp of 2, 3 or 4 divides it (padded to 62, 63 and 64); 12 heads: every tp does.
constexpr std::int64_t classes = 61, seq = 6;
sg::models::gpt2_config config(std::int64_t padded_vocab) {
  return {.vocab = classes, .positions = 8, .model = 48, .heads = 12, .layers = 4, .padded_vocab = padded_vocab};
}
std::int64_t padded_for(int tp) { return (classes + tp - 1) / tp * tp; }

const sg::program& program_of(bool sharded) {
  static std::map<bool, std::unique_ptr<sg::program>> cache;
  auto& p = cache[sharded];
  if (!p) {
    const sg::graph g =
        sharded ? sg::models::gpt2<Mesh>({.type = sg::dtype::f64})
                : sg::models::gpt2<Mesh>({.type = sg::dtype::f64, .data_axis = "", .tensor_axis = ""});
    p = std::make_unique<sg::program>(sg::compile_graph(g, sg::training{}));
    REQUIRE(p->ok());
  }
  return *p;
}

// Rows [first, first + rows) of a batch whose targets are -100 at an uneven number of positions
// per row (row 0: all of them, row 1: none, row r: r % 4 of them), so that equal weights per
// micro-batch or per rank would not give the mean over the counted targets.
sg::tensor_map tokens(std::int64_t rows, std::int64_t first, int step = 0) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(rows * seq)), targets(ids.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t t = 0; t < seq; ++t) {
      const std::int64_t row = first + r, global = row * seq + t + 100 * step;
      const bool ignored = row == 0 || (row > 1 && t < row % 4);
      ids[static_cast<std::size_t>(r * seq + t)] = (global * 37 + 11) % classes;
      targets[static_cast<std::size_t>(r * seq + t)] = ignored ? -100 : (global * 53 + 7) % classes;
    }
  sg::tensor_map m;
  m.emplace("input_ids", sg::host_tensor::from<std::int64_t>({rows, seq}, ids));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({rows, seq}, targets));
  return m;
}

using weights = std::map<std::string, std::vector<double>>;

template <class Parts>
void add_slices(const Parts& parts, weights& whole) {
  for (auto& [name, part] : parts) {
    std::vector<double>& dst = whole[name];
    std::int64_t n = 1;
    for (auto v : part.slice.global) n *= v;
    dst.resize(static_cast<std::size_t>(n));
    sg::for_each_in_slice(part.slice, [&](std::int64_t g, std::int64_t l) {
      dst[static_cast<std::size_t>(g)] = part.values.at(l);
    });
  }
}

// The vocabulary's rows [classes, padded) of the tied table, cut off (and returned).
std::vector<double> cut_padding(weights& w) {
  std::vector<double>& table = w.at("wte.weight");
  const auto real = static_cast<std::ptrdiff_t>(classes * config(0).model);
  std::vector<double> padding(table.begin() + real, table.end());
  table.resize(static_cast<std::size_t>(real));
  return padding;
}

// The largest, over tensors, of max |a - b| / max |b|.
double max_relative_difference(const weights& a, const weights& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (auto& [name, want] : b) {
    const std::vector<double>& have = a.at(name);
    REQUIRE(have.size() == want.size());
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      diff = std::max(diff, std::abs(have[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    // (a floor for gradients that are zero in exact arithmetic and rounding noise in practice:
    // attention's key bias, as softmax ignores a shift shared by all keys)
    worst = std::max(worst, diff / std::max(scale, 1e-5));
  }
  return worst;
}

struct layout {
  int dp = 1, tp = 1, pp = 1, micro = 1;
};
sg::mesh_shape mesh_of(layout l) { return {{"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}}; }

// One forward (with its backward) of `batch` rows: rank 0's loss and the whole gradients.
struct gradients_run {
  double loss = 0;
  weights gradients;
};
gradients_run gradients_of(const sg::program& p, layout l, std::int64_t padded, std::int64_t rows) {
  gradients_run result;
  std::mutex m;
  sg::threads::world(l.dp * l.tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, config(padded).sizes(rows, seq), comm, sg::cpu::backend{}, mesh_of(l),
                         sg::random_weights(7, 0.3));
    const double loss = rank.forward(tokens(rows, 0), "loss").at("loss").at(0);
    auto grads = rank.gradients();
    std::lock_guard lock(m);
    add_slices(grads, result.gradients);
    if (comm.rank() == 0) result.loss = loss;
  });
  return result;
}

// Two AdamW steps of `rows` rows each, split into l.micro micro-batches: rank 0's losses and
// gradient norms (AdamW's first steps hardly depend on the gradients' scale; the norm does), and
// the whole weights.
struct training_run {
  std::vector<double> losses, norms;
  weights trained;
};
training_run train(const sg::program& p, layout l, std::int64_t padded, std::int64_t rows) {
  training_run result;
  std::mutex m;
  const sg::training_options options{
      .adamw = {.lr = 1e-2, .weight_decay = 0.1}, .schedule = std::nullopt, .max_grad_norm = 0};
  sg::pipeline_options pipe;
  if (l.pp > 1) pipe.micro_batches = l.micro;
  sg::threads::world(l.dp * l.tp * l.pp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, config(padded).sizes(rows / l.micro, seq), comm, sg::cpu::backend{}, mesh_of(l),
                         sg::random_weights(7, 0.3), pipe);
    sg::trainer t(rank, options);
    std::vector<double> losses, norms;
    for (int s = 0; s < 2; ++s) {
      std::vector<sg::tensor_map> parts;
      for (int k = 0; k < l.micro; ++k) parts.push_back(tokens(rows / l.micro, k * (rows / l.micro), s));
      const sg::step_report r = t.step(parts);
      losses.push_back(r.loss);
      norms.push_back(r.grad_norm);
    }
    auto params = rank.parameters();
    std::lock_guard lock(m);
    add_slices(params, result.trained);
    if (comm.rank() == 0) {
      result.losses = losses;
      result.norms = norms;
    }
  });
  return result;
}

// torch's F.cross_entropy(logits[..., :classes], targets) (ignore_index -100, mean) from the logits.
double torch_loss(const sg::host_tensor& logits, const sg::host_tensor& targets) {
  const std::int64_t vocab = logits.shape().back(), positions = targets.numel();
  double sum = 0;
  std::int64_t counted = 0;
  for (std::int64_t i = 0; i < positions; ++i) {
    const auto target = static_cast<std::int64_t>(targets.at(i));
    if (target == -100) continue;
    double row_max = -std::numeric_limits<double>::infinity(), exps = 0;
    for (std::int64_t j = 0; j < classes; ++j) row_max = std::max(row_max, logits.at(i * vocab + j));
    for (std::int64_t j = 0; j < classes; ++j) exps += std::exp(logits.at(i * vocab + j) - row_max);
    sum += row_max + std::log(exps) - logits.at(i * vocab + target);
    ++counted;
  }
  return sum / static_cast<double>(counted);
}

// Runs `body` on every rank of a `ranks` world and returns the distinct errors (every rank must throw).
template <class Body>
std::set<std::string> errors_on_every_rank(int ranks, Body body) {
  std::set<std::string> messages;
  std::mutex m;
  int failures = 0;
  try {
    sg::threads::world(ranks).run([&](sg::threads::communicator& comm) {
      try {
        body(comm);
      } catch (const sg::error& e) {
        std::lock_guard lock(m);
        messages.insert(e.what());
        ++failures;
        throw;
      }
    });
  } catch (const sg::error&) {
  }
  CHECK(failures == ranks);
  return messages;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("the loss is torch's: ignored targets left out of the mean, the vocabulary's padding out of the softmax",
          "[models][training][threads]") {
  // One rank, the vocabulary padded to 64 rows whose padding holds random (nonzero) weights.
  sg::tensor_map out;
  const sg::tensor_map batch = tokens(4, 0);
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(program_of(false), config(64).sizes(4, seq), comm, sg::cpu::backend{}, mesh_of({}),
                         sg::random_weights(7, 0.3));
    out = rank.forward(batch);
  });
  const double want = torch_loss(out.at("logits"), batch.at("targets"));
  CHECK(std::abs(out.at("loss").at(0) - want) <= 1e-12 * std::abs(want));
}

TEST_CASE("a forward whose every target is ignored gives torch's NaN; a training step refuses it",
          "[models][training][threads]") {
  sg::tensor_map batch = tokens(2, 0);
  for (std::int64_t& t : batch.at("targets").values<std::int64_t>()) t = -100;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(program_of(false), config(0).sizes(2, seq), comm, sg::cpu::backend{}, mesh_of({}),
                         sg::random_weights(7, 0.3));
    CHECK(std::isnan(rank.forward(batch, "loss").at("loss").at(0)));
    for (auto& [name, g] : rank.gradients()) {
      CAPTURE(name);
      CHECK(std::all_of(g.values.values<double>().begin(), g.values.values<double>().end(),
                        [](double x) { return x == 0; }));
    }
  });
  const auto messages = errors_on_every_rank(2, [&](sg::threads::communicator& comm) {
    auto rank = sg::bind(program_of(true), config(0).sizes(2, seq), comm, sg::cpu::backend{}, mesh_of({.dp = 2}),
                         sg::random_weights(7, 0.3));
    comm.barrier();  // every rank past bind's collectives: the error is each rank's own
    sg::trainer t(rank, {});
    const std::vector<sg::tensor_map> parts{batch, batch};  // two micro-batches, no target counted in either
    t.step(parts);
  });
  REQUIRE(messages.size() == 1);
  CHECK(contains(*messages.begin(), "shardgraph: trainer step 1: every target of the step is the ignore index"));
}

TEST_CASE("loss and gradients with ignored targets and a padded vocabulary equal one rank's on every dp x tp",
          "[models][training][threads]") {
  const std::int64_t rows = 4;
  const gradients_run reference = gradients_of(program_of(false), {}, 0, rows);
  REQUIRE(reference.gradients.size() >= 10);
  for (layout l : {layout{.tp = 2}, layout{.tp = 3}, layout{.tp = 4}, layout{.dp = 2, .tp = 3}, layout{.dp = 4}}) {
    CAPTURE(l.dp, l.tp, padded_for(l.tp));
    gradients_run got = gradients_of(program_of(true), l, padded_for(l.tp), rows);
    CHECK(std::abs(got.loss - reference.loss) <= 1e-9 * std::abs(reference.loss));
    const std::vector<double> padding = cut_padding(got.gradients);
    CHECK(std::all_of(padding.begin(), padding.end(), [](double g) { return g == 0; }));
    CHECK(max_relative_difference(got.gradients, reference.gradients) <= 1e-9);
  }
}

TEST_CASE("training steps over micro-batches, data-parallel ranks and pipeline stages equal one rank's",
          "[models][training][pipeline][threads]") {
  const std::int64_t rows = 8;
  const training_run reference = train(program_of(false), {}, 0, rows);
  for (layout l : {layout{.micro = 4}, layout{.dp = 2, .micro = 2}, layout{.dp = 2, .tp = 3, .micro = 2},
                   layout{.pp = 2, .micro = 4}, layout{.dp = 2, .tp = 2, .pp = 2, .micro = 2}}) {
    CAPTURE(l.dp, l.tp, l.pp, l.micro);
    const sg::program& p = l.dp * l.tp * l.pp == 1 ? program_of(false) : program_of(true);
    training_run got = train(p, l, padded_for(l.tp), rows);
    REQUIRE(got.losses.size() == reference.losses.size());
    for (std::size_t s = 0; s < got.losses.size(); ++s) {
      CHECK(std::abs(got.losses[s] - reference.losses[s]) <= 1e-9 * std::abs(reference.losses[s]));
      CHECK(std::abs(got.norms[s] - reference.norms[s]) <= 1e-9 * reference.norms[s]);
    }
    cut_padding(got.trained);
    CHECK(max_relative_difference(got.trained, reference.trained) <= 1e-9);
  }
}

TEST_CASE("token ids and targets outside the vocabulary are one error, naming the input, row and position",
          "[models][threads]") {
  struct bad_case {
    const char* input;
    std::int64_t row, position, value;
    const char* expected;
  };
  for (const bad_case& c :
       {bad_case{"input_ids", 1, 2, classes,
                 "forward: input 'input_ids': id 61 at batch row 1, position 2 is outside the vocabulary [0, 61)"},
        bad_case{"input_ids", 0, 5, -100, "input 'input_ids': id -100 at batch row 0, position 5"},
        bad_case{"targets", 3, 0, 63,
                 "input 'targets': target 63 at batch row 3, position 0 is outside the vocabulary [0, 61) (or the "
                 "ignore index -100)"},
        bad_case{"targets", 2, 4, -1, "target -1 at batch row 2, position 4"}}) {
    CAPTURE(c.input, c.value);
    sg::tensor_map batch = tokens(4, 0);
    batch.at(c.input).values<std::int64_t>()[static_cast<std::size_t>(c.row * seq + c.position)] = c.value;
    // dp = 2, tp = 2: each rank holds two rows; every rank reports the same id, wherever it lies
    const auto forward_errors = errors_on_every_rank(4, [&](sg::threads::communicator& comm) {
      auto rank = sg::bind(program_of(true), config(64).sizes(4, seq), comm, sg::cpu::backend{},
                           mesh_of({.dp = 2, .tp = 2}), sg::random_weights(7, 0.3));
      comm.barrier();  // every rank past bind's collectives: the error is each rank's own
      rank.forward(batch);
    });
    REQUIRE(forward_errors.size() == 1);
    CHECK(contains(*forward_errors.begin(), c.expected));
    // in a training step: before any micro-batch runs, named with its step and micro-batch
    const auto step_errors = errors_on_every_rank(4, [&](sg::threads::communicator& comm) {
      auto rank = sg::bind(program_of(true), config(64).sizes(4, seq), comm, sg::cpu::backend{},
                           mesh_of({.dp = 2, .tp = 2}), sg::random_weights(7, 0.3));
      comm.barrier();  // every rank past bind's collectives: the error is each rank's own
      sg::trainer t(rank, {});
      const std::vector<sg::tensor_map> parts{tokens(4, 0), batch};
      t.step(parts);
    });
    REQUIRE(step_errors.size() == 1);
    CHECK(contains(*step_errors.begin(), "shardgraph: trainer step 1, micro-batch 1: forward: input '"));
    CHECK(contains(*step_errors.begin(), c.expected));
  }
}

TEST_CASE("cross_entropy's ignore index and sum reduction are the DSL op's attributes", "[models][training][threads]") {
  using Mesh2 = sg::mesh<"dp", "tp">;
  constexpr auto model = [](bool sharded) {
    namespace dim = sg::dim;
    sg::builder<Mesh2> g(sg::dtype::f64);
    const sg::shape tokens{dim::batch, dim::seq};
    auto ids = sharded ? g.input("input_ids", tokens, sg::dtype::i64, sg::on<"dp">(sg::shard<0>))
                       : g.input("input_ids", tokens, sg::dtype::i64);
    auto targets = sharded ? g.input("targets", tokens, sg::dtype::i64, sg::on<"dp">(sg::shard<0>))
                           : g.input("targets", tokens, sg::dtype::i64);
    auto x = sg::embedding(ids, g.param("wte.weight", {dim::vocab, dim::model}));
    auto logits = sg::linear(x, g.param("head.weight", {dim::model, dim::vocab}));
    sg::output(sg::cross_entropy(logits, targets, {.ignore_index = 5, .reduction = sg::loss_reduction::sum}), "loss");
    sg::output(logits, "logits");
    return g.finish();
  };
  static constexpr sg::program single = sg::compile_graph(model(false), sg::training{});
  static constexpr sg::program sharded = sg::compile_graph(model(true), sg::training{});
  sg::model_sizes sizes;
  sizes.set(sg::size_symbol::batch, 4).set(sg::size_symbol::seq, 3).set(sg::size_symbol::vocab, 8);
  sizes.set(sg::size_symbol::model, 6);
  sizes.classes = 7;
  std::vector<std::int64_t> ids(12), targets(12);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>(i * 3 % 7);
    targets[i] = i % 4 == 1 ? 5 : static_cast<std::int64_t>(i * 5 % 7);  // 5: ignored here
  }
  targets[2] = -100;  // not this loss's ignore index, and outside [0, 7)
  sg::tensor_map batch;
  batch.emplace("input_ids", sg::host_tensor::from<std::int64_t>({4, 3}, ids));
  batch.emplace("targets", sg::host_tensor::from<std::int64_t>({4, 3}, targets));
  const auto messages = errors_on_every_rank(1, [&](sg::threads::communicator& comm) {
    auto rank = sg::bind(single, sizes, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", 1}, {"tp", 1}},
                         sg::random_weights(2, 0.5));
    rank.forward(batch);
  });
  REQUIRE(messages.size() == 1);
  CHECK(contains(*messages.begin(), "target -100 at batch row 0, position 2 is outside the vocabulary [0, 7) (or "
                                    "the ignore index 5)"));
  batch.at("targets").values<std::int64_t>()[2] = 0;

  std::vector<double> losses;
  std::mutex m;
  for (int dp : {1, 2}) {
    sg::threads::world(dp).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(dp == 1 ? single : sharded, sizes, comm, sg::cpu::backend{},
                           sg::mesh_shape{{"dp", dp}, {"tp", 1}}, sg::random_weights(2, 0.5));
      const sg::tensor_map out = rank.forward(batch);
      if (comm.rank() != 0) return;
      std::lock_guard lock(m);
      losses.push_back(out.at("loss").at(0));
      if (dp == 1) {  // torch's F.cross_entropy(logits[..., :7], targets, ignore_index=5, reduction="sum")
        const sg::host_tensor& logits = out.at("logits");
        double want = 0;
        for (std::int64_t i = 0; i < 12; ++i) {
          const std::int64_t t = batch.at("targets").values<std::int64_t>()[static_cast<std::size_t>(i)];
          if (t == 5) continue;
          double row_max = -1e300, exps = 0;
          for (int j = 0; j < 7; ++j) row_max = std::max(row_max, logits.at(i * 8 + j));
          for (int j = 0; j < 7; ++j) exps += std::exp(logits.at(i * 8 + j) - row_max);
          want += row_max + std::log(exps) - logits.at(i * 8 + t);
        }
        CHECK(std::abs(losses.back() - want) <= 1e-12 * std::abs(want));
      }
    });
  }
  REQUIRE(losses.size() == 2);
  CHECK(std::abs(losses[1] - losses[0]) <= 1e-12 * std::abs(losses[0]));
}
