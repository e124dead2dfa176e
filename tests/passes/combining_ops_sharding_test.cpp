// The ops along one dimension (dsl/combining.hpp): their shapes, propagate_sharding's signatures
// (passes/along_dimension_sharding.hpp) and autodiff's gradients.
#include "catch.hpp"
#include "test_models.hpp"

namespace sg = shardgraph;
using namespace test_models;

namespace {

constexpr sg::extent tokens = sg::dim::named<"tokens">;

// h (batch, seq, ffn) Shard<0> on dp, Shard<2> on tp (a column-parallel linear); a replicated class
// token (batch, 1, ffn) and a Partial part (a row-parallel linear's result).
constexpr sg::graph along_dimensions() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  auto h = sg::linear(x, g.param("w_in", {model, ffn}, sg::on<"tp">(sg::shard<1>)));
  auto cls = g.param("cls", {batch, sg::dim::fixed<1>, ffn});
  auto joined = sg::rename(sg::concat({cls, h}, 1, tokens), "joined");  // along seq: passes
  sg::output(sg::rename(sg::slice(joined, 1, 0, sg::dim::fixed<1>), "first"), "a");
  sg::output(sg::rename(sg::slice(joined, 1, sg::dim::fixed<1>, seq), "rest"), "b");
  sg::output(sg::rename(sg::concat({h, h}, 2, sg::dim::named<"wide">), "wide"), "c");  // along ffn: gathered
  auto partial = sg::linear(h, g.param("w_out", {ffn, model}, sg::on<"tp">(sg::shard<0>)));
  sg::output(sg::rename(sg::concat({partial, partial}, 1, tokens), "partials"), "d");  // all P: P
  sg::output(sg::rename(sg::concat({partial, x}, 1, tokens), "mixed"), "e");  // P with S(0) on dp, R on tp
  sg::output(sg::rename(sg::sum(h, 2), "features"), "f");                     // over ffn (tp): P
  sg::output(sg::rename(sg::mean(h, 1), "positions"), "g");                   // over seq: S(2) -> S(1)
  sg::output(sg::rename(sg::broadcast(sg::mean(h, 1), 1, seq), "spread"), "h");  // S(1) -> S(2) again
  return g.finish();
}

}  // namespace

TEST_CASE("concat and slice: shapes name the result's dimension", "[passes]") {
  static constexpr sg::graph g = along_dimensions();
  STATIC_REQUIRE(g.ok());
  using sg::dim::batch, sg::dim::seq, sg::dim::ffn;
  STATIC_REQUIRE(named(g, "joined", sg::op::concat).shape == sg::shape{batch, tokens, ffn});
  STATIC_REQUIRE(named(g, "first", sg::op::slice).shape == sg::shape{batch, sg::dim::fixed<1>, ffn});
  STATIC_REQUIRE(named(g, "rest", sg::op::slice).shape == sg::shape{batch, seq, ffn});
  STATIC_REQUIRE(named(g, "rest", sg::op::slice).slice_after == sg::dim::fixed<1>.first);
  STATIC_REQUIRE(named(g, "features", sg::op::sum).shape == sg::shape{batch, seq});
  STATIC_REQUIRE(named(g, "spread", sg::op::broadcast).shape == sg::shape{batch, seq, ffn});
}

TEST_CASE("propagate_sharding: concat and slice pass placements along an unsharded dimension", "[passes]") {
  static constexpr sg::graph g = sg::passes::propagate_sharding(along_dimensions());
  STATIC_REQUIRE(g.ok());
  constexpr const sg::node& joined = named(g, "joined", sg::op::concat);
  STATIC_REQUIRE(joined.spec[dp] == sg::shard<0>);
  STATIC_REQUIRE(joined.spec[tp] == sg::shard<2>);
  STATIC_REQUIRE(joined.required[0][tp] == sg::shard<2>);  // the replicated class token: sliced
  STATIC_REQUIRE(named(g, "first", sg::op::slice).spec[tp] == sg::shard<2>);
  STATIC_REQUIRE(named(g, "rest", sg::op::slice).required[0][dp] == sg::shard<0>);
  constexpr const sg::node& wide = named(g, "wide", sg::op::concat);  // along ffn, sharded on tp
  STATIC_REQUIRE(wide.required[0][tp] == sg::replicate);
  STATIC_REQUIRE(wide.spec[tp] == sg::replicate);
  STATIC_REQUIRE(named(g, "partials", sg::op::concat).spec[tp] == sg::partial);
  constexpr const sg::node& mixed = named(g, "mixed", sg::op::concat);
  STATIC_REQUIRE(mixed.required[0][tp] == sg::replicate);  // the Partial part is reduced first
  STATIC_REQUIRE(mixed.spec[dp] == sg::shard<0>);
}

TEST_CASE("propagate_sharding: sum and mean over a sharded dimension are Partial", "[passes]") {
  static constexpr sg::graph g = sg::passes::propagate_sharding(along_dimensions());
  constexpr const sg::node& features = named(g, "features", sg::op::sum);
  STATIC_REQUIRE(features.spec[tp] == sg::partial);
  STATIC_REQUIRE(features.required[0][tp] == sg::shard<2>);  // no gather: each rank sums its slice
  STATIC_REQUIRE(features.spec[dp] == sg::shard<0>);
  constexpr const sg::node& positions = named(g, "positions", sg::op::mean);
  STATIC_REQUIRE(positions.spec[tp] == sg::shard<1>);  // ffn moves from dimension 2 to 1
  STATIC_REQUIRE(named(g, "spread", sg::op::broadcast).spec[tp] == sg::shard<2>);
}

TEST_CASE("autodiff: concat's gradients are slices, slice's a slice_grad, mean's a broadcast", "[passes]") {
  // x (batch, seq, model) -> linear (batch, seq, vocab) "logits"; a token (batch, 1, vocab) before it
  // -> concat "joined" (batch, tokens, vocab) -> mean over tokens, broadcast back, + the sequence's slice
  static constexpr sg::graph p = sg::passes::autodiff([] {
    using namespace sg::dim;
    sg::builder<Mesh> b;
    auto x = b.input("x", {batch, seq, model}, sg::dtype::f32);
    auto targets = b.input("targets", {batch, seq}, sg::dtype::i64);
    auto logits = sg::rename(sg::linear(x, b.param("w", {model, vocab})), "logits");
    auto joined = sg::rename(sg::concat({b.param("token", {batch, sg::dim::fixed<1>, vocab}), logits}, 1, tokens), "joined");
    auto rest = sg::rename(sg::slice(joined, 1, sg::dim::fixed<1>, seq), "rest");
    auto pooled = sg::rename(sg::mean(joined, 1), "pooled");
    sg::output(sg::cross_entropy(rest + sg::broadcast(pooled, 1, seq), targets), "loss");
    return b.finish();
  }());
  STATIC_REQUIRE(p.ok());
  constexpr const sg::node& token_grad = named(p, "d.token", sg::op::slice);  // part 0 of d.joined
  STATIC_REQUIRE(token_grad.along.part == 0);
  STATIC_REQUIRE(p[token_grad.origin].kind == sg::op::concat);
  STATIC_REQUIRE(named(p, "d.logits", sg::op::slice).along.part == 1);
  STATIC_REQUIRE(named(p, "d.rest", sg::op::slice_grad).shape == sg::shape{sg::dim::batch, tokens, sg::dim::vocab});
  constexpr const sg::node& spread = named(p, "d.pooled", sg::op::broadcast);
  STATIC_REQUIRE(spread.along.mean);
  STATIC_REQUIRE(spread.shape == sg::shape{sg::dim::batch, tokens, sg::dim::vocab});
}
