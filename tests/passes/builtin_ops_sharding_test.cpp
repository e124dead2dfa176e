// propagate_sharding's signatures of the built-in ops beyond GPT's (relu, the erf GELU): the
// placements they pass through, and the ones they need gathered first.
#include "catch.hpp"
#include "test_models.hpp"

namespace sg = shardgraph;
using namespace test_models;

namespace {

// x Shard<0> on dp -> column-parallel linear (Shard<2> on tp) -> relu -> row-parallel linear (Partial
// on tp) -> gelu_erf -> the loss.
constexpr sg::graph activations_mlp() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto w_in = g.param("w_in", {model, ffn}, sg::on<"tp">(sg::shard<1>));
  auto w_out = g.param("w_out", {ffn, model}, sg::on<"tp">(sg::shard<0>));
  auto h = sg::rename(sg::relu(sg::linear(x, w_in)), "h");
  auto y = sg::rename(sg::gelu_erf(sg::linear(h, w_out)), "y");
  sg::output(sg::cross_entropy(sg::linear(y, g.param("head", {model, vocab})), targets), "loss");
  return g.finish();
}

// x (batch, seq, model) Shard<0> on dp, Shard<2> on tp -> permute {2, 0, 1} -> (model, batch, seq);
// a row-parallel product's Partial result -> transpose(0, 1).
constexpr sg::graph permutes() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>), sg::on<"tp">(sg::shard<2>));
  sg::output(sg::rename(sg::permute(x, {2, 0, 1}), "moved"), "a");
  auto w = g.param("w", {model, ffn}, sg::on<"tp">(sg::shard<0>));
  sg::output(sg::rename(sg::transpose(sg::linear(x, w), 0, 1), "partial"), "b");
  return g.finish();
}

}  // namespace

TEST_CASE("propagate_sharding: a sharded dimension moves with its permutation", "[passes]") {
  static constexpr sg::graph g = sg::passes::propagate_sharding(permutes());
  STATIC_REQUIRE(g.ok());
  constexpr const sg::node& moved = named(g, "moved", sg::op::permute);
  STATIC_REQUIRE(moved.shape == sg::shape{sg::dim::model, sg::dim::batch, sg::dim::seq});
  STATIC_REQUIRE(moved.spec[dp] == sg::shard<1>);  // batch: dimension 0 -> 1
  STATIC_REQUIRE(moved.spec[tp] == sg::shard<0>);  // model: dimension 2 -> 0
  STATIC_REQUIRE(moved.required[0][tp] == sg::shard<2>);  // read as it is: no collective
  constexpr const sg::node& partial = named(g, "partial", sg::op::permute);
  STATIC_REQUIRE(partial.spec[tp] == sg::partial);  // a permutation is linear: Partial passes
  STATIC_REQUIRE(partial.spec[dp] == sg::shard<1>);
}

TEST_CASE("autodiff: permute's gradient is the inverse permutation", "[passes]") {
  // x (batch, seq, model) -> linear: (batch, seq, vocab) -> permute {1, 2, 0} "moved" -> permute back
  static constexpr sg::graph p = sg::passes::propagate_sharding(sg::passes::autodiff([] {
    using namespace sg::dim;
    sg::builder<Mesh> b;
    auto x = b.input("x", {batch, seq, model}, sg::dtype::f32);
    auto targets = b.input("targets", {batch, seq}, sg::dtype::i64);
    auto w = b.param("w", {model, vocab}, sg::on<"tp">(sg::shard<1>));
    auto moved = sg::rename(sg::permute(sg::linear(x, w), {1, 2, 0}), "moved");  // (seq, vocab, batch)
    sg::output(sg::cross_entropy(sg::permute(moved, {2, 0, 1}), targets), "loss");
    return b.finish();
  }()));
  STATIC_REQUIRE(p.ok());
  constexpr const sg::node& back = named(p, "d.moved", sg::op::permute);
  STATIC_REQUIRE(back.permutation[0] == 2 && back.permutation[1] == 0 && back.permutation[2] == 1);
  STATIC_REQUIRE(back.shape == sg::shape{sg::dim::batch, sg::dim::seq, sg::dim::vocab});
}
TEST_CASE("propagate_sharding: relu passes a sharded dimension through", "[passes]") {
  static constexpr sg::graph g = sg::passes::propagate_sharding(activations_mlp());
  STATIC_REQUIRE(g.ok());
  constexpr const sg::node& h = named(g, "h", sg::op::relu);
  STATIC_REQUIRE(h.spec[dp] == sg::shard<0>);
  STATIC_REQUIRE(h.spec[tp] == sg::shard<2>);
  STATIC_REQUIRE(h.required[0][tp] == sg::shard<2>);
}

TEST_CASE("propagate_sharding: gelu_erf of a Partial value needs it whole", "[passes]") {
  static constexpr sg::graph g = sg::passes::propagate_sharding(activations_mlp());
  constexpr const sg::node& y = named(g, "y", sg::op::gelu_erf);
  STATIC_REQUIRE(g[y.inputs[0]].spec[tp] == sg::partial);
  STATIC_REQUIRE(y.required[0][tp] == sg::replicate);  // an all_reduce on tp
  STATIC_REQUIRE(y.spec[tp] == sg::replicate);
  STATIC_REQUIRE(y.spec[dp] == sg::shard<0>);
}

TEST_CASE("propagate_sharding: relu_grad and gelu_erf_grad take x's placement for dy", "[passes]") {
  static constexpr sg::graph g = sg::passes::propagate_sharding(sg::passes::autodiff(activations_mlp()));
  STATIC_REQUIRE(g.ok());
  constexpr auto grad_of = [](const sg::graph& gr, sg::op kind) -> const sg::node& {
    for (const sg::node& n : gr.nodes)
      if (n.kind == kind) return n;
    throw "test: no such gradient";
  };
  constexpr const sg::node& relu_grad = grad_of(g, sg::op::relu_grad);
  STATIC_REQUIRE(relu_grad.spec[tp] == sg::shard<2>);  // x Shard<2>: dy (Replicate) is sliced to it
  STATIC_REQUIRE(relu_grad.required[1][tp] == sg::shard<2>);
  constexpr const sg::node& gelu_grad = grad_of(g, sg::op::gelu_erf_grad);
  STATIC_REQUIRE(gelu_grad.required[0][tp] == sg::replicate);  // x was Partial: read whole
  STATIC_REQUIRE(gelu_grad.spec[dp] == sg::shard<0>);
}
