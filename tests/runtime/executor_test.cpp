// The executor on thread ranks: every redistribution kind (all_reduce, all_gather,
// reduce_scatter, all_to_all, local_slice) gives the one-rank result, and bind's size checks
// throw the same shardgraph::error on every rank before any compute.
#include <cmath>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/threads.hpp>

#include "../passes/test_models.hpp"
#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;
using test_models::Mesh;

namespace {

sg::model_sizes small_sizes() {
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, 4).set(sg::size_symbol::seq, 8).set(sg::size_symbol::model, 12);
  s.set(sg::size_symbol::ffn, 16).set(sg::size_symbol::layers, 1);
  return s;
}

sg::host_tensor pattern(std::vector<std::int64_t> shape) {
  sg::host_tensor t(sg::dtype::f32, shape);
  auto v = t.values<float>();
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  return t;
}

sg::tensor_map run(const sg::program& p, int dp, int tp, const sg::tensor_map& inputs) {
  sg::tensor_map result;
  std::mutex m;
  sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, small_sizes(), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}, {"tp", tp}},
                         sg::random_weights(3));
    auto out = rank.forward(inputs);
    std::lock_guard lock(m);
    if (result.empty()) result = out;
    else
      for (auto& [name, t] : out)
        for (std::int64_t i = 0; i < t.numel(); ++i) REQUIRE(result.at(name).at(i) == t.at(i));  // same on every rank
  });
  return result;
}

void check_against_one_rank(const sg::program& p, const sg::tensor_map& inputs) {
  REQUIRE(p.ok());
  const sg::host_tensor reference = run(p, 1, 1, inputs).at("y");
  double scale = 0;
  for (std::int64_t i = 0; i < reference.numel(); ++i) scale = std::max(scale, std::abs(reference.at(i)));
  REQUIRE(scale > 0.1);
  for (auto [dp, tp] : {std::pair{1, 2}, {1, 4}, {2, 2}, {2, 1}}) {
    CAPTURE(dp, tp);
    const sg::host_tensor got = run(p, dp, tp, inputs).at("y");
    double diff = 0;
    for (std::int64_t i = 0; i < got.numel(); ++i) diff = std::max(diff, std::abs(got.at(i) - reference.at(i)));
    CHECK(diff / scale < 1e-5);
  }
}

}  // namespace

TEST_CASE("all_reduce, all_gather and fused bias chains: the Megatron MLP equals one rank", "[runtime][threads]") {
  static constexpr sg::program p = sg::compile_graph(test_models::megatron_mlp_with_bias());
  sg::tensor_map in;
  in.emplace("x", pattern({4, 8, 12}));
  check_against_one_rank(p, in);
}

TEST_CASE("reduce_scatter: a row-parallel result sharded on the sequence equals one rank", "[runtime][threads]") {
  static constexpr sg::program p = sg::compile_graph(test_models::row_parallel_to_sequence_shard());
  STATIC_REQUIRE(p.count(sg::op::reduce_scatter) == 1);
  sg::tensor_map in;
  in.emplace("h", pattern({4, 8, 16}));
  check_against_one_rank(p, in);
}

TEST_CASE("all_to_all: sequence-sharded to hidden-sharded equals one rank", "[runtime][threads]") {
  static constexpr sg::program p = sg::compile_graph(test_models::sequence_to_hidden());
  STATIC_REQUIRE(p.count(sg::op::all_to_all) == 1);
  sg::tensor_map in;
  in.emplace("x", pattern({4, 8, 12}));
  check_against_one_rank(p, in);
}

TEST_CASE("redistribute on tp only: the batch stays sharded on dp, and equals one rank",
          "[runtime][threads]") {
  static constexpr sg::program p = sg::compile_graph(test_models::redistribute_on_tp_only());
  STATIC_REQUIRE(p.count(sg::op::all_to_all, "tp") == 1);
  STATIC_REQUIRE(p.count(sg::op::all_gather, "dp") == 1);  // for the output only
  sg::tensor_map in;
  in.emplace("x", pattern({4, 8, 12}));
  check_against_one_rank(p, in);
}

TEST_CASE("local_slice: a replicated input meeting a row-parallel weight equals one rank", "[runtime][threads]") {
  static constexpr sg::program p = sg::compile_graph([] {
    using namespace sg::dim;
    sg::builder<Mesh> g;
    auto x = g.input("x", {batch, model}, sg::dtype::f32);
    auto w = g.param("w", {model, ffn}, sg::on<"tp">(sg::shard<0>));
    sg::output(sg::linear(x, w), "y");
    return g.finish();
  }());
  STATIC_REQUIRE(p.count(sg::op::local_slice) == 1);
  sg::tensor_map in;
  in.emplace("x", pattern({4, 12}));
  check_against_one_rank(p, in);
}

namespace {
// Runs bind on every rank and collects the distinct error messages.
std::set<std::string> bind_errors(const sg::program& p, const sg::model_sizes& sizes, int ranks, const sg::mesh_shape& mesh) {
  std::set<std::string> messages;
  std::mutex m;
  int failures = 0;
  try {
    sg::threads::world(ranks).run([&](sg::threads::communicator& comm) {
      try {
        auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, mesh, sg::random_weights());
      } catch (const sg::error& e) {
        std::lock_guard lock(m);
        messages.insert(e.what());
        ++failures;
        throw;
      }
    });
  } catch (const sg::error&) {
  }
  REQUIRE(failures == ranks);  // every rank failed, none hung in a collective
  return messages;
}
}  // namespace

TEST_CASE("bind: heads not divisible by tp is one clear error on every rank", "[runtime][threads]") {
  static constexpr sg::program p = sg::compile_graph(sg::models::gpt2<Mesh>());
  sg::models::gpt2_config c{.vocab = 64, .positions = 16, .model = 24, .heads = 6, .layers = 1};
  auto errors = bind_errors(p, c.sizes(2, 8), 4, {{"tp", 4}});
  REQUIRE(errors.size() == 1);
  const std::string& e = *errors.begin();
  CHECK(e.rfind("shardgraph: bind: ", 0) == 0);
  CHECK(e.find("heads = 6 is not divisible by tp = 4") != std::string::npos);
}

TEST_CASE("bind: a dimension not divisible by its shard count names the node and the dimension", "[runtime][threads]") {
  static constexpr sg::program p = sg::compile_graph(test_models::megatron_mlp());
  sg::model_sizes s = small_sizes();
  s.set(sg::size_symbol::ffn, 10);
  auto errors = bind_errors(p, s, 4, {{"tp", 4}});
  REQUIRE(errors.size() == 1);
  CHECK(errors.begin()->find("'mlp.c_fc.weight': dimension 1 (ffn) is sharded on 'tp' but ffn = 10") != std::string::npos);
}

TEST_CASE("bind: a wrong rank count for the mesh says how many ranks to start", "[runtime][threads]") {
  static constexpr sg::program p = sg::compile_graph(test_models::megatron_mlp());
  auto errors = bind_errors(p, small_sizes(), 3, {{"dp", 2}, {"tp", 2}});
  REQUIRE(errors.size() == 1);
  CHECK(errors.begin()->find("the communicator has 3 ranks but mesh dp=2,tp=2 needs 4. start 4 ranks") != std::string::npos);
  auto unknown = bind_errors(p, small_sizes(), 2, {{"pp", 2}});
  CHECK(unknown.begin()->find("mesh axis 'pp': the program's mesh has no such axis (it has dp, tp)") != std::string::npos);
}

TEST_CASE("forward: a missing or misshapen input is an error naming it", "[runtime][threads]") {
  static constexpr sg::program p = sg::compile_graph(test_models::megatron_mlp());
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, small_sizes(), comm, sg::cpu::backend{}, {}, sg::random_weights());
    try {
      rank.forward({});
      FAIL("no error");
    } catch (const sg::error& e) {
      CHECK(std::string(e.what()).find("input 'x' is missing") != std::string::npos);
    }
    sg::tensor_map wrong;
    wrong.emplace("x", pattern({4, 8, 11}));
    try {
      rank.forward(wrong);
      FAIL("no error");
    } catch (const sg::error& e) {
      CHECK(std::string(e.what()).find("expected f32 (4, 8, 12) but got f32 (4, 8, 11)") != std::string::npos);
    }
  });
}
