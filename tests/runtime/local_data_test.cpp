// Local data on thread ranks: each rank given its own slices of the inputs (io_part::local) gets the
// outputs, the loss and, through the trainer, the weights of the same run given the whole tensors,
// on dp, tp and dp x tp layouts; a mean loss counts the targets of every rank's slices; asked for
// them, each rank receives its own slice of an output. A rank whose slices are wrong makes every
// rank throw before any compute, that rank with its error and the others naming it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/trainer.hpp>
#include <shardgraph/threads.hpp>

#include "../passes/test_models.hpp"
#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;
using test_models::Mesh;

namespace {

using rank_program = sg::rank_program<sg::cpu::backend, sg::threads::communicator>;

// ids and targets (batch, seq) sharded on dp; a vocabulary-parallel table and head on tp.
constexpr sg::graph tiny_lm() {
  using namespace sg::dim;
  sg::builder<Mesh> g(sg::dtype::f64);
  auto ids = g.input("input_ids", {batch, seq}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto table = g.param("wte.weight", {vocab, model}, sg::on<"tp">(sg::shard<0>));
  auto head = g.param("head.weight", {model, vocab}, sg::on<"tp">(sg::shard<1>));
  sg::output(sg::cross_entropy(sg::linear(sg::gelu(sg::embedding(ids, table)), head), targets), "loss");
  return g.finish();
}
constexpr sg::program lm = sg::compile_graph(tiny_lm(), sg::training{});
constexpr sg::program hidden = sg::compile_graph(test_models::redistribute_on_tp_only());

sg::model_sizes sizes(std::int64_t batch) {
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, batch).set(sg::size_symbol::seq, 8).set(sg::size_symbol::model, 12);
  s.set(sg::size_symbol::vocab, 8);
  return s;
}

// A step's batch (4, 8): the targets of rows 0 and 1 (dp rank 0's, on dp = 2) all but one the
// ignore index, so the ranks' slices count 1 and 16 targets; a mean over either alone is wrong.
sg::tensor_map tokens(int step) {
  std::vector<std::int64_t> ids(32), targets(32);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>((i * 5 + 3 + static_cast<std::size_t>(step)) % 8);
    targets[i] =
        i < 16 && i != 6 ? -100 : static_cast<std::int64_t>((i * 3 + static_cast<std::size_t>(step)) % 8);
  }
  sg::tensor_map m;
  m.emplace("input_ids", sg::host_tensor::from<std::int64_t>({4, 8}, ids));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({4, 8}, targets));
  return m;
}

// The block [first, first + count) of t, along every dimension.
sg::host_tensor block(const sg::host_tensor& t, std::vector<std::int64_t> first,
                      std::vector<std::int64_t> count) {
  sg::host_tensor part(t.type(), count);
  const std::size_t e = sg::dtype_size(t.type());
  sg::for_each_in_slice(sg::tensor_slice{t.shape(), first, count}, [&](std::int64_t g, std::int64_t l) {
    std::memcpy(part.bytes().data() + static_cast<std::size_t>(l) * e,
                t.bytes().data() + static_cast<std::size_t>(g) * e, e);
  });
  return part;
}

// This rank's rows on dp of a (batch, ...) tensor sharded on dp only.
sg::host_tensor rows_of(const sg::host_tensor& t, const rank_program& rank, int dp) {
  std::vector<std::int64_t> first(t.shape().size(), 0), count = t.shape();
  count[0] /= dp;
  first[0] = rank.coordinate("dp") * count[0];
  return block(t, first, count);
}

bool same(const sg::host_tensor& a, const sg::host_tensor& b) {
  return a.type() == b.type() && a.shape() == b.shape() &&
         std::equal(a.bytes().begin(), a.bytes().end(), b.bytes().begin());
}

// Runs fn(rank) on dp x tp thread ranks bound to p for batches of `batch` rows; returns what each
// rank's fn returned, by rank.
template <class Fn>
auto on_ranks(const sg::program& p, int dp, int tp, Fn fn, std::int64_t batch = 4) {
  std::map<int, decltype(fn(std::declval<rank_program&>()))> results;
  std::mutex m;
  sg::threads::world(dp * tp, std::chrono::seconds(60)).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, sizes(batch), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}, {"tp", tp}},
                         sg::random_weights(3, 0.3));
    auto r = fn(rank);
    std::lock_guard lock(m);
    results.emplace(comm.rank(), std::move(r));
  });
  return results;
}

}  // namespace

TEST_CASE("forward: each rank's slices of an input sharded on dp and tp give the whole run's output",
          "[runtime][threads]") {
  sg::host_tensor x(sg::dtype::f32, {4, 8, 12});
  for (std::size_t i = 0; i < x.values<float>().size(); ++i)
    x.values<float>()[i] = std::cos(0.21f * static_cast<float>(i));
  for (auto [dp, tp] : {std::pair{2, 1}, {1, 2}, {2, 2}}) {
    CAPTURE(dp, tp);
    const auto checks = on_ranks(hidden, dp, tp, [&](rank_program& rank) {
      // x (batch, seq, model): batch on dp, seq on tp
      const std::int64_t b = 4 / dp, t = 8 / tp;
      const sg::tensor_map mine{
          {"x", block(x, {rank.coordinate("dp") * b, rank.coordinate("tp") * t, 0}, {b, t, 12})}};
      const sg::host_tensor whole = rank.forward({{"x", x}}).at("y");
      const sg::host_tensor from_slices = rank.forward(mine, {.inputs = sg::io_part::local}).at("y");
      // y's value is (batch, seq, model) with batch on dp, model on tp, before the output gathers it
      const std::int64_t m = 12 / tp;
      const sg::host_tensor part =
          rank.forward(mine, {.inputs = sg::io_part::local, .outputs = sg::io_part::local}).at("y");
      const sg::host_tensor want =
          block(whole, {rank.coordinate("dp") * b, 0, rank.coordinate("tp") * m}, {b, 8, m});
      return std::pair{same(whole, from_slices), same(part, want)};
    });
    REQUIRE(checks.size() == static_cast<std::size_t>(dp * tp));
    for (const auto& [r, check] : checks) {
      CAPTURE(r);
      CHECK(check.first);   // the whole output, from the slices
      CHECK(check.second);  // this rank's block of it, on request
    }
  }
}

TEST_CASE("forward: a mean loss over local slices counts the targets of every rank's slice",
          "[runtime][threads]") {
  const sg::tensor_map batch = tokens(0);
  for (auto [dp, tp] : {std::pair{2, 1}, {2, 2}}) {
    CAPTURE(dp, tp);
    const auto losses = on_ranks(lm, dp, tp, [&](rank_program& rank) {
      sg::tensor_map mine;
      for (const auto& [name, t] : batch) {
        const sg::local_dims& d =
            sg::input_slice(rank.compiled().nodes, rank.layout(), name);  // as a user cuts it
        mine.emplace(name, block(t, d.offset, d.local));
      }
      const bool rows = same(mine.at("targets"), rows_of(batch.at("targets"), rank, dp));
      const double whole = rank.forward(batch, "loss").at("loss").at(0);
      const double local = rank.forward(mine, {.inputs = sg::io_part::local}, "loss").at("loss").at(0);
      return std::tuple{whole, local, rows};
    });
    for (const auto& [r, loss] : losses) {
      CAPTURE(r);
      const auto& [whole, local, rows] = loss;
      CHECK(rows);
      CHECK(whole > 0.1);
      CHECK(std::abs(local - whole) <= 1e-12 * whole);
    }
  }
}

TEST_CASE("trainer: local micro-batches train to the weights of whole ones", "[runtime][training][threads]") {
  auto train = [](sg::io_part given) {
    return on_ranks(
        lm, 2, 2,
        [given](rank_program& rank) {
          sg::trainer t(rank, {.adamw = {.lr = 1e-2}, .schedule = std::nullopt, .max_grad_norm = 1.0});
          std::vector<double> losses;
          for (int step = 0; step < 2; ++step) {
            std::vector<sg::tensor_map> halves(2);  // two micro-batches of 2 rows, each cut by dp
            for (const auto& [name, tensor] : tokens(step))
              for (std::size_t k = 0; k < 2; ++k) {
                const sg::host_tensor half = block(tensor, {2 * static_cast<std::int64_t>(k), 0}, {2, 8});
                halves[k].emplace(name, given == sg::io_part::local ? rows_of(half, rank, 2) : half);
              }
            losses.push_back(t.step(halves, {.inputs = given}).loss);
          }
          std::map<std::string, std::vector<double>> weights;
          for (auto& [name, part] : rank.parameters()) {
            const auto v = part.values.values<double>();
            weights[name].assign(v.begin(), v.end());
          }
          return std::pair{losses, weights};
        },
        2);
  };
  const auto whole = train(sg::io_part::whole), local = train(sg::io_part::local);
  for (const auto& [r, run] : whole) {
    CAPTURE(r);
    const auto& [losses, weights] = local.at(r);
    REQUIRE(losses.size() == run.first.size());
    for (std::size_t s = 0; s < losses.size(); ++s)
      CHECK(std::abs(losses[s] - run.first[s]) <= 1e-12 * run.first[s]);
    for (const auto& [name, w] : run.second) {
      CAPTURE(name);
      const std::vector<double>& got = weights.at(name);
      REQUIRE(got.size() == w.size());
      double diff = 0;
      for (std::size_t i = 0; i < w.size(); ++i) diff = std::max(diff, std::abs(got[i] - w[i]));
      CHECK(diff <= 1e-12);
    }
  }
}

TEST_CASE("forward and trainer: one rank's wrong slice stops every rank, naming it", "[runtime][threads]") {
  // rank 1 (dp coordinate 1) gives a slice of 3 rows, or an id outside the vocabulary
  auto errors = [](bool through_trainer, auto spoil) {
    return on_ranks(lm, 2, 1, [&](rank_program& rank) {
      sg::tensor_map mine;
      for (const auto& [name, t] : tokens(0)) mine.emplace(name, rows_of(t, rank, 2));
      if (rank.coordinate("dp") == 1) spoil(mine);
      try {
        if (through_trainer)
          sg::trainer(rank, {}).step(mine, {.inputs = sg::io_part::local});
        else
          rank.forward(mine, {.inputs = sg::io_part::local});
      } catch (const sg::error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    });
  };
  const auto shape = errors(false, [](sg::tensor_map& m) {
    m.at("input_ids") = sg::host_tensor(sg::dtype::i64, {3, 8});
  });
  CHECK(shape.at(1) ==
        "shardgraph: forward: input 'input_ids': expected this rank's slice i64 (2, 8) of the global i64 (4, "
        "8) but "
        "got i64 (3, 8). give each rank its own slice of the global tensor (shardgraph::input_slice gives "
        "its offset and shape)");
  CHECK(shape.at(0) ==
        "shardgraph: forward: rank 0: rank 1 found its slices of the inputs wrong, so no rank runs. see the "
        "error "
        "rank 1 reported; give each rank its own slice of every input (shardgraph::input_slice gives its "
        "offset and shape)");

  const auto id = errors(true, [](sg::tensor_map& m) { m.at("input_ids").values<std::int64_t>()[9] = 99; });
  CHECK(id.at(1) ==
        "shardgraph: trainer step 1: forward: input 'input_ids': id 99 at batch row 1, position 1 is outside "
        "the "
        "vocabulary [0, 8). check the tokenizer's vocabulary against the model's vocab");
  CHECK(id.at(0).starts_with("shardgraph: trainer step 1: forward: rank 0: rank 1 found its slices"));

  const auto whole =
      errors(false, [](sg::tensor_map& m) { m = tokens(0); });  // the whole batch, called a slice
  CHECK(whole.at(1).find("but got the whole tensor. pass this rank's slice, or the whole tensor without "
                         "io_options{.inputs = io_part::local}") != std::string::npos);
}
