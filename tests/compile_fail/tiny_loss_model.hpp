#pragma once
// The smallest model with a loss, for the compile-fail cases of training options: a batch-sharded
// input, one linear layer, cross-entropy.
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>

namespace sg = shardgraph;

constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto w = g.param("lm_head.weight", {model, vocab});
  sg::output(sg::cross_entropy(sg::linear(x, w), targets), "loss");
  return g.finish();
}
