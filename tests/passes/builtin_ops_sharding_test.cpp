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

}  // namespace

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
