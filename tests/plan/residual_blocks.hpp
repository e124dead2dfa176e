#pragma once
// A two-phase test program for the planning passes: a residual MLP block repeated over layers,
// embedding-free (its `pre` phase is the input's product), with a head and a loss.
#include <shardgraph/shardgraph.hpp>

namespace plan_programs {

namespace sg = shardgraph;
using Mesh = sg::mesh<"dp", "tp">;

// x -> linear(w_in) -> repeat "h" { h + gelu(linear(h, w)) } -> linear(w_out) -> cross_entropy
constexpr sg::graph residual_blocks() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i32);
  auto w_in = g.param("w_in", {model, model});
  auto w_out = g.param("w_out", {model, vocab});
  auto h = sg::repeat("h", sg::linear(x, w_in), [](sg::graph_builder& b, sg::tensor t) {
    auto w = b.param("w", {model, model});
    return t + sg::gelu(sg::linear(t, w));
  });
  sg::output(sg::cross_entropy(sg::linear(h, w_out), targets), "loss");
  return g.finish();
}

}  // namespace plan_programs
