// concat, slice, sum, mean and broadcast (dsl/combining.hpp) in tiny models, trained one step forward
// and backward on one rank and on dp=2 x tp=2 thread ranks; loss and every gradient equal one rank's
// (f64, relative 1e-9). The layouts join and slice along dimensions no rank shards (batch on dp and
// the hidden features on tp pass through), along a sharded one (gathered first), and reduce
// over sharded ones (Partial results).
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include <shardgraph/cpu.hpp>
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/whole_gradients.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
using test_support::gradient_map;

constexpr std::int64_t n_batch = 2, n_seq = 3, n_model = 4, n_ffn = 6, n_vocab = 5;
constexpr sg::extent tokens = sg::dim::named<"tokens">;  // seq + 1: a class token before the sequence
constexpr sg::extent wide = sg::dim::named<"wide">;      // 2 ffn: two feature blocks side by side

sg::model_sizes sizes() {
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, n_batch).set(sg::size_symbol::seq, n_seq).set(sg::size_symbol::vocab, n_vocab);
  s.set(sg::size_symbol::model, n_model).set(sg::size_symbol::ffn, n_ffn);
  s.set("tokens", n_seq + 1).set("wide", 2 * n_ffn);
  return s;
}

// The models' frame: x (batch, seq, model) Shard<0> on dp -> a column-parallel linear: h (batch, seq,
// ffn) Shard<2> on tp -> Body(g, h) (batch, seq, ffn) -> a row-parallel linear + x -> the loss of a
// replicated head.
template <sg::tensor (*Body)(sg::builder<Mesh>&, sg::tensor)>
constexpr sg::graph tiny_model() {
  using namespace sg::dim;
  sg::builder<Mesh> g(sg::dtype::f64);
  const auto batch_on_dp = sg::on<"dp">(sg::shard<0>);
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f64, batch_on_dp);
  auto h = sg::linear(x, g.param("w_in", {model, ffn}, sg::on<"tp">(sg::shard<1>)));
  auto y = sg::linear(Body(g, h), g.param("w_out", {ffn, model}, sg::on<"tp">(sg::shard<0>))) + x;
  auto logits = sg::linear(y, g.param("head", {model, vocab}));
  sg::output(sg::cross_entropy(logits, g.input("targets", {batch, seq}, sg::dtype::i64, batch_on_dp)), "loss");
  return g.finish();
}

// A class token (1, ffn) broadcast over the batch and put before the sequence (concat along seq,
// which no rank shards: dp and tp pass through), then the class token's state and the sequence's
// taken back (slices), and the mean over the tokens and the class token's sum added to every position.
constexpr sg::tensor class_token_body(sg::builder<Mesh>& g, sg::tensor h) {
  using namespace sg::dim;
  auto cls = sg::broadcast(g.param("cls", {sg::dim::fixed<1>, ffn}), 0, batch);  // (batch, 1, ffn)
  auto states = sg::silu(sg::concat({cls, h}, 1, tokens));                        // (batch, tokens, ffn)
  auto first = sg::sum(sg::slice(states, 1, 0, sg::dim::fixed<1>), 1);            // (batch, ffn)
  auto rest = sg::slice(states, 1, sg::dim::fixed<1>, seq);                       // (batch, seq, ffn)
  return rest + sg::broadcast(sg::mean(states, 1) + first, 1, seq);
}
constexpr sg::program class_token = sg::compile<tiny_model<class_token_body>, sg::training{}>();
static_assert(class_token.count(sg::op::concat) == 1 && class_token.count(sg::op::slice) == 4);  // 2 + 2 gradients
static_assert(class_token.count(sg::op::slice_grad) == 2 && class_token.count(sg::op::broadcast) == 4);
// Nothing is sharded along seq: the one gather is the class token's gradient (Shard<1> on tp after the
// sum over the batch), gathered for its replicated parameter.
static_assert(class_token.count(sg::op::all_gather) == 1);


// Along sharded dimensions: two feature blocks joined along ffn (sharded on tp: gathered first) and
// the second taken back (a slice at offset ffn), scaled by the features' mean (ffn sharded: a
// Partial mean) and the batch's sum (batch sharded on dp: a Partial sum).
constexpr sg::tensor sharded_body(sg::builder<Mesh>&, sg::tensor h) {
  using namespace sg::dim;
  auto [left, right] = sg::split(sg::concat({sg::silu(h), h}, 2, wide), 2, ffn, ffn);
  auto features = sg::broadcast(sg::mean(h, 2), 2, ffn);                       // (batch, seq, ffn)
  auto batch_sum = sg::broadcast(sg::sum(right * features, 0), 0, batch);      // (batch, seq, ffn)
  return left + right * features + batch_sum;
}
constexpr sg::program sharded = sg::compile<tiny_model<sharded_body>, sg::training{}>();
static_assert(sharded.count(sg::op::all_gather, "tp") >= 1);  // the concat's parts along ffn

// Trains one step of p on one rank and on dp=2 x tp=2; checks that both give the same loss and
// gradients.
void check_equal_to_one_rank(const sg::program& p, std::size_t parameters) {
  double reference_loss = 0, loss = 0;
  const auto weights = sg::random_weights(11, 0.7);
  const auto inputs = test_support::sine_inputs(n_batch, n_seq, n_model, n_vocab);
  const gradient_map reference =
      test_support::whole_gradients(p, sizes(), {{"dp", 1}, {"tp", 1}}, weights, inputs, &reference_loss);
  REQUIRE(reference.size() == parameters);
  const gradient_map got = test_support::whole_gradients(p, sizes(), {{"dp", 2}, {"tp", 2}}, weights, inputs, &loss);
  CHECK(std::isfinite(reference_loss));
  CHECK(std::abs(loss - reference_loss) <= 1e-12 * std::abs(reference_loss));
  test_support::check_same_gradients(got, reference, 1e-9);
}

// The first `count` elements of parameter `name`'s gradient on one rank equal central differences
// of the loss: the gradients place each part's, slice's and reduction's share where it belongs.
void check_finite_differences(const sg::program& p, std::string_view name, std::int64_t count) {
  const auto inputs = test_support::sine_inputs(n_batch, n_seq, n_model, n_vocab);
  double base = 0;
  const gradient_map g = test_support::whole_gradients(p, sizes(), {{"dp", 1}, {"tp", 1}},
                                                       sg::random_weights(11, 0.7), inputs, &base);
  auto loss_with = [&](std::int64_t at, double delta) {
    const sg::weight_source random = sg::random_weights(11, 0.7);
    const sg::weight_source moved = [&](std::string_view w, const sg::tensor_slice& slice, sg::host_tensor& out) {
      random(w, slice, out);
      if (w == name) out.set(at, out.at(at) + delta);
    };
    double loss = 0;
    sg::threads::world(1).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(p, sizes(), comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", 1}, {"tp", 1}}, moved);
      loss = rank.forward(inputs).at("loss").at(0);
    });
    return loss;
  };
  const double eps = 1e-6;
  for (std::int64_t at = 0; at < count; ++at) {
    CAPTURE(name, at);
    const double numeric = (loss_with(at, eps) - loss_with(at, -eps)) / (2 * eps);
    CHECK(std::abs(numeric - g.at(std::string(name))[static_cast<std::size_t>(at)]) <=
          1e-6 * std::max(1.0, std::abs(numeric)));
  }
}

}  // namespace

TEST_CASE("combining ops: gradients equal finite differences of the loss", "[runtime][threads]") {
  check_finite_differences(class_token, "cls", n_ffn);
  check_finite_differences(class_token, "w_in", n_ffn);
  check_finite_differences(sharded, "w_in", n_ffn);
}

TEST_CASE("combining ops: a class token's concat and slices train on dp=2 x tp=2 as on one rank",
          "[runtime][threads]") {
  check_equal_to_one_rank(class_token, 4);
}

TEST_CASE("combining ops: concat, slice, sum and mean along sharded dimensions train as on one rank",
          "[runtime][threads]") {
  check_equal_to_one_rank(sharded, 3);
}

TEST_CASE("combining ops: bind names a concat whose result is not its parts' sum", "[runtime][threads]") {
  sg::model_sizes s = sizes();
  s.set("tokens", n_seq + 2);
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    CHECK_THROWS_WITH(sg::bind(class_token, s, comm, sg::cpu::backend{}, {{"dp", 1}, {"tp", 1}}, sg::random_weights(1, 0.5)),
                      sg::testing::ContainsSubstring(
                          "shardgraph: bind: concat 'concat': the parts' sizes along dimension 1 add up to 4 "
                          "(1 + 3), but the result's tokens is 5. size tokens as the parts' sum: "
                          "sizes.set(\"tokens\", 4)"));
  });
}

// x (batch, seq, model) -> seq positions from `skip` on: past x's end wherever skip > 0.
constexpr sg::graph slice_past_the_end() {
  using namespace sg::dim;
  sg::builder<Mesh> g(sg::dtype::f64);
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f64);
  sg::output(sg::slice(x, 1, sg::dim::named<"skip">, seq), "y");
  return g.finish();
}

TEST_CASE("combining ops: bind names a slice that ends past its input", "[runtime][threads]") {
  static constexpr sg::program p = sg::compile<slice_past_the_end>();
  sg::model_sizes s = sizes();
  s.set("skip", 1);
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    CHECK_THROWS_WITH(sg::bind(p, s, comm, sg::cpu::backend{}, {{"dp", 1}, {"tp", 1}}, sg::random_weights(1, 0.5)),
                      sg::testing::ContainsSubstring(
                          "shardgraph: bind: slice 'slice': the slice [1, 4) along dimension 1 ends past x's 3"));
  });
}
