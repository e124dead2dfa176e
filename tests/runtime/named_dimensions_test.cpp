// A model over dimensions of the user's own (dim::named, dim::fixed): compiled, bound with the
// named sizes, trained one step forward and backward on one rank and on tp=2 thread ranks that
// shard a named dimension; loss and every gradient equal one rank's (f64, relative 1e-9).
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/plan/print_bound_plan.hpp>
#include <shardgraph/program/print_text.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "support/whole_gradients.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;

// A mixture-like MLP: features -> experts * 3 (column parallel: tp splits the experts) -> vocab
// (row parallel), then the loss. "features" and "experts" are sized at bind; 3 is fixed here.
constexpr sg::graph expert_mlp() {
  using namespace sg::dim;
  constexpr sg::extent hidden = named<"experts"> * fixed<3>;
  sg::builder<Mesh> g(sg::dtype::f64);
  auto x = g.input("x", {batch, seq, named<"features">}, sg::dtype::f64);
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i64);
  auto w_in = g.param("w_in", {named<"features">, hidden}, sg::on<"tp">(sg::shard<1>));
  auto b_in = g.param("b_in", {hidden}, sg::on<"tp">(sg::shard<0>));
  auto w_out = g.param("w_out", {hidden, vocab}, sg::on<"tp">(sg::shard<0>));
  sg::output(sg::cross_entropy(sg::linear(sg::gelu(sg::linear(x, w_in, b_in)), w_out), targets), "loss");
  return g.finish();
}
constexpr sg::program train = sg::compile<expert_mlp, sg::training{}>();
static_assert(train.count(sg::op::param_grad) == 3);
static_assert(train.count(sg::op::all_reduce, "tp") >= 1);  // w_out's product is Partial on tp

constexpr std::int64_t n_batch = 2, n_seq = 3, n_features = 5, n_experts = 4, n_vocab = 7;

sg::model_sizes sizes() {
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, n_batch).set(sg::size_symbol::seq, n_seq).set(sg::size_symbol::vocab, n_vocab);
  s.set("features", n_features).set("experts", n_experts);
  return s;
}

sg::tensor_map inputs() {
  std::vector<double> x(n_batch * n_seq * n_features);
  std::vector<std::int64_t> targets(n_batch * n_seq);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i));
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int64_t>((i * 5 + 1) % n_vocab);
  sg::tensor_map m;
  m.emplace("x", sg::host_tensor::from<double>({n_batch, n_seq, n_features}, x));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({n_batch, n_seq}, targets));
  return m;
}

using test_support::gradient_map;

gradient_map gradients(int tp, double* loss) {
  return test_support::whole_gradients(train, sizes(), {{"dp", 1}, {"tp", tp}}, sg::random_weights(7, 0.5), inputs(), loss);
}

}  // namespace

TEST_CASE("named dimensions: tp=2 sharding 'experts' trains as one rank does", "[runtime][threads]") {
  double reference_loss = 0, loss = 0;
  const gradient_map reference = gradients(1, &reference_loss);
  REQUIRE(reference.size() == 3);
  REQUIRE(reference.at("w_in").size() == static_cast<std::size_t>(n_features * n_experts * 3));  // (features, experts*3)
  REQUIRE(reference.at("w_out").size() == static_cast<std::size_t>(n_experts * 3 * n_vocab));
  const gradient_map got = gradients(2, &loss);
  CHECK(std::abs(loss - reference_loss) < 1e-12 * std::abs(reference_loss));
  test_support::check_same_gradients(got, reference);
}

TEST_CASE("named dimensions: printers show the user's names", "[runtime][program]") {
  std::ostringstream text;
  sg::print_program(text, train);
  CHECK(text.str().find("(features, experts*3/tp)") != std::string::npos);
  CHECK(text.str().find("(experts*3/tp, vocab)") != std::string::npos);
  std::ostringstream plan;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(train, sizes(), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", 1}, {"tp", 1}}, sg::random_weights());
    sg::plan::print(rank.plan(), plan);
  });
  CHECK(plan.str().find("; batch 2, seq 3, features 5, experts 4, ") != std::string::npos);
}

TEST_CASE("named dimensions: the bound plan of a model without seq shows the sizes it has", "[runtime][plan]") {
  static constexpr sg::program p = sg::compile_graph([] {
    using namespace sg::dim;
    sg::builder<Mesh> g;
    auto x = g.input("x", {batch, named<"features">}, sg::dtype::f32);
    sg::output(sg::linear(x, g.param("w", {named<"features">, fixed<2>})), "y");
    return g.finish();
  }());
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, 4).set("features", 5);
  std::ostringstream plan;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, s, comm, sg::cpu::backend{}, sg::mesh_shape{}, sg::random_weights());
    sg::plan::print(rank.plan(), plan);
  });
  CHECK(plan.str().find("of mesh dp=1 tp=1; batch 4, features 5, ") != std::string::npos);
}

TEST_CASE("named dimensions: a size tp does not divide names the dimension", "[runtime][threads]") {
  sg::model_sizes s = sizes();
  s.set("experts", 3);
  std::string message;
  try {
    sg::threads::world(2).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(train, s, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", 1}, {"tp", 2}}, sg::random_weights());
    });
  } catch (const sg::error& e) {
    message = e.what();
  }
  CHECK(message.find("(experts*3) is sharded on 'tp' but experts = 3 is not divisible by tp = 2") != std::string::npos);
}
