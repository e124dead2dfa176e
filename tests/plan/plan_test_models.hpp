#pragma once
// A two-layer Megatron MLP with a head, for the bucket and ZeRO-3 plan tests, and its per-rank
// element counts at sizes written here.
//
//   x (batch, seq, model), Shard<0> on dp
//   repeat "h" (2 layers) { t + linear(gelu(linear(t, w_in)), w_out) }   w_in column-, w_out row-parallel on
//   tp loss = cross_entropy(linear(h, w_head), targets)
//
// At model = 5, ffn = 6, vocab = 7 and tp = 2 each rank holds 5 x 3 = 15 elements of h.w_in and of
// h.w_out (per layer) and all 5 x 7 = 35 of w_head; their gradients are Partial on dp.
#include <cstdint>
#include <string_view>
#include <vector>

#include <shardgraph/passes/compile.hpp>
#include <shardgraph/runtime/local_layout.hpp>
#include <shardgraph/shardgraph.hpp>

#include "catch.hpp"

namespace plan_test_models {

namespace sg = shardgraph;
using Mesh = sg::mesh<"dp", "tp">;
inline constexpr int dp_axis = 0;

constexpr sg::graph mlp_blocks() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i32, sg::on<"dp">(sg::shard<0>));
  auto w_head = g.param("w_head", {model, vocab});
  auto h = sg::repeat("h", x, [](sg::graph_builder& b, sg::tensor t) {
    auto w_in = b.param("w_in", {model, ffn}, sg::on<"tp">(sg::shard<1>));
    auto w_out = b.param("w_out", {ffn, model}, sg::on<"tp">(sg::shard<0>));
    return t + sg::linear(sg::gelu(sg::linear(t, w_in)), w_out);
  });
  sg::output(sg::cross_entropy(sg::linear(h, w_head), targets), "loss");
  return g.finish();
}

inline constexpr std::int64_t layers = 2;

// Every node's elements on the rank at `coordinates` of a dp x tp mesh.
inline std::vector<std::int64_t> local_elements(const sg::program& p, int dp, int tp,
                                                std::vector<int> coordinates) {
  sg::model_sizes sizes;
  sizes.set(sg::size_symbol::batch, 4).set(sg::size_symbol::seq, 2).set(sg::size_symbol::model, 5);
  sizes.set(sg::size_symbol::ffn, 6).set(sg::size_symbol::vocab, 7).set(sg::size_symbol::layers, layers);
  const sg::local_layout layout(p, sizes, sg::mesh_shape{{"dp", dp}, {"tp", tp}}, std::move(coordinates));
  std::vector<std::int64_t> elements;
  for (int i = 0; i < p.nodes.size(); ++i) elements.push_back(layout.of(i).numel());
  return elements;
}

inline int parameter_named(const sg::graph& g, std::string_view name) {
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == sg::op::parameter && g[i].name.view() == name) return i;
  FAIL("no parameter " << name);
  return -1;
}
inline int gradient_of(const sg::graph& g, std::string_view name) {
  const int p = parameter_named(g, name);
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == sg::op::param_grad && g[i].origin == p) return i;
  FAIL("no gradient of " << name);
  return -1;
}
inline int repeat_begin(const sg::graph& g, bool reverse) {
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == sg::op::repeat_begin && g[i].reverse == reverse) return i;
  FAIL("no repeat block");
  return -1;
}

}  // namespace plan_test_models
