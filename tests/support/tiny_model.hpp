#pragma once
// The frame of the tiny equivalence models (f64, mesh dp x tp): x (batch, seq, model) Shard<0> on dp,
// w_in (model, ffn) column parallel and w_out (ffn, model) row parallel on tp,
// Body(x, w_in, w_out) -> (batch, seq, model), then the loss of a replicated head against
// targets (batch, seq).
#include <shardgraph/dsl/ops.hpp>

namespace test_support {

template <shardgraph::tensor (*Body)(shardgraph::tensor, shardgraph::tensor, shardgraph::tensor)>
constexpr shardgraph::graph tiny_model() {
  namespace sg = shardgraph;
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g(sg::dtype::f64);
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f64, sg::on<"dp">(sg::shard<0>));
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto w_in = g.param("w_in", {model, ffn}, sg::on<"tp">(sg::shard<1>));
  auto w_out = g.param("w_out", {ffn, model}, sg::on<"tp">(sg::shard<0>));
  auto y = Body(x, w_in, w_out);
  sg::output(sg::cross_entropy(sg::linear(y, g.param("head", {model, vocab})), targets), "loss");
  return g.finish();
}

}  // namespace test_support
