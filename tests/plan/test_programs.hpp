#pragma once
// Small programs for the plan tests: an input product before a repeat block of residual MLPs and a
// loss after it, on a mesh with a `pp` axis (compile's pipeline axis); with a weight tied across
// the block, or with a second block.
#include <string_view>

#include <shardgraph/passes/compile.hpp>
#include <shardgraph/shardgraph.hpp>

#include "catch.hpp"

namespace plan_test_programs {

namespace sg = shardgraph;
using Mesh = sg::mesh<"dp", "pp">;

// x -> linear(w_in) -> repeat "h" { t + gelu(linear(t, w)) } -> linear(w_out) -> cross_entropy.
// Tied: the head reads w_in too, linear(linear(h, w_in), w_out), as GPT-2's head reads wte.
// Two blocks: a second repeat "g" of the same layer follows "h".
template <bool Tied, int Blocks = 1>
constexpr sg::graph residual_blocks() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i32);
  auto w_in = g.param("w_in", {model, model});
  auto w_out = g.param("w_out", {model, vocab});
  const auto layer = [](sg::graph_builder& b, sg::tensor t) {
    auto w = b.param("w", {model, model});
    return t + sg::gelu(sg::linear(t, w));
  };
  auto h = sg::repeat("h", sg::linear(x, w_in), layer);
  if (Blocks == 2) h = sg::repeat("g", h, layer);
  auto head = Tied ? sg::linear(h, w_in) : h;
  sg::output(sg::cross_entropy(sg::linear(head, w_out), targets), "loss");
  return g.finish();
}

inline constexpr sg::program untied = sg::compile<residual_blocks<false>, sg::training{}>();
inline constexpr sg::program tied = sg::compile<residual_blocks<true>, sg::training{}>();
inline constexpr sg::program two_repeats = sg::compile<residual_blocks<false, 2>, sg::training{}>();
inline constexpr sg::program untied_inference = sg::compile<residual_blocks<false>, sg::inference{}>();

inline int node_named(const sg::graph& g, std::string_view name, sg::op kind) {
  for (int i = 0; i < g.size(); ++i)
    if (g[i].name.view() == name && g[i].kind == kind) return i;
  FAIL("no node " << name);
  return -1;
}
// The first node of `kind` reading node `input` (-1: none).
inline int reader_of(const sg::graph& g, int input, sg::op kind) {
  for (int i = 0; i < g.size(); ++i)
    for (int k = 0; k < g[i].input_count; ++k)
      if (g[i].kind == kind && g[i].inputs[k] == input) return i;
  return -1;
}
// The param_grad node of parameter `p`.
inline int gradient_of(const sg::graph& g, int p) {
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == sg::op::param_grad && g[i].origin == p) return i;
  FAIL("no gradient of node " << p);
  return -1;
}

}  // namespace plan_test_programs
