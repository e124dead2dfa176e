#pragma once
// Small graphs shared by the pass tests: Megatron's MLP on a (dp, tp) mesh, and variants.
#include <string_view>

// The compile-time layers only, not the whole of <shardgraph/shardgraph.hpp>: these tests run no
// program, and the passes' tests stay cheap to compile.
#include <shardgraph/core/dtype.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/core/model_sizes.hpp>
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/dsl/repeat.hpp>
#include <shardgraph/mesh/mesh.hpp>
#include <shardgraph/mesh/mesh_shape.hpp>
#include <shardgraph/mesh/shard_spec.hpp>
#include <shardgraph/models/gpt2.hpp>
#include <shardgraph/models/llama.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/program/program.hpp>

namespace test_models {

namespace sg = shardgraph;
using Mesh = sg::mesh<"dp", "tp">;

// x (batch, seq, model) sharded on dp; W1 column parallel, W2 row parallel on tp.
constexpr sg::graph megatron_mlp() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  auto w_in = g.param("mlp.c_fc.weight", {model, ffn}, sg::on<"tp">(sg::shard<1>));
  auto w_out = g.param("mlp.c_proj.weight", {ffn, model}, sg::on<"tp">(sg::shard<0>));
  sg::output(sg::linear(sg::gelu(sg::linear(x, w_in)), w_out), "y");
  return g.finish();
}

// The same MLP with a bias after each linear: bias + gelu fuse into one step.
constexpr sg::graph megatron_mlp_with_bias() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  auto w_in = g.param("mlp.c_fc.weight", {model, ffn}, sg::on<"tp">(sg::shard<1>));
  auto b_in = g.param("mlp.c_fc.bias", {ffn}, sg::on<"tp">(sg::shard<0>));
  auto w_out = g.param("mlp.c_proj.weight", {ffn, model}, sg::on<"tp">(sg::shard<0>));
  auto b_out = g.param("mlp.c_proj.bias", {model});
  auto y = sg::linear(sg::gelu(sg::linear(x, w_in, b_in)), w_out, b_out);
  sg::output(y + x, "y");
  return g.finish();
}

// A Shard<2> activation meets a consumer that wants Shard<1>: an all_to_all on tp.
constexpr sg::graph sequence_to_hidden() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32, sg::on<"tp">(sg::shard<1>));
  auto y = sg::redistribute(sg::gelu(x), sg::on<"tp">(sg::shard<2>));
  sg::output(y, "y");
  return g.finish();
}

// x sharded on dp (batch) and tp (sequence), redistributed on tp only: dp is not named, so the batch
// stays sharded on dp through the redistribution; only the output gathers it.
constexpr sg::graph redistribute_on_tp_only() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>),
                   sg::on<"tp">(sg::shard<1>));
  auto y = sg::rename(sg::redistribute(sg::gelu(x), sg::on<"tp">(sg::shard<2>)), "hidden_sharded");
  sg::output(sg::gelu(y), "y");
  return g.finish();
}

// A Partial value asked for as Shard<1>: a reduce_scatter (sequence parallelism's pattern).
constexpr sg::graph row_parallel_to_sequence_shard() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto h = g.input("h", {batch, seq, ffn}, sg::dtype::f32, sg::on<"tp">(sg::shard<2>));
  auto w = g.param("w", {ffn, model}, sg::on<"tp">(sg::shard<0>));
  auto y = sg::redistribute(sg::linear(h, w), sg::on<"tp">(sg::shard<1>));
  sg::output(sg::gelu(y), "y");
  return g.finish();
}


// The node called `name` of kind `kind`; fails the constant evaluation when there is none.
constexpr const shardgraph::node& named(const shardgraph::graph& g, std::string_view name, shardgraph::op kind) {
  for (const shardgraph::node& n : g.nodes)
    if (n.name.view() == name && n.kind == kind) return n;
  throw "test: node not found";
}

inline constexpr int dp = 0, tp = 1;  // axis indices of Mesh
inline constexpr shardgraph::graph mlp = megatron_mlp();
inline constexpr shardgraph::graph verified = shardgraph::passes::verify(mlp);
inline constexpr shardgraph::graph propagated = shardgraph::passes::propagate_sharding(verified);
inline constexpr shardgraph::graph with_collectives = shardgraph::passes::insert_collectives(propagated);

}  // namespace test_models
