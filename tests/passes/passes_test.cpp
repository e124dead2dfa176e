// Compile-time tests of the passes (DESIGN §6.2): STATIC_REQUIRE on each pass's output.
#include <sstream>

#include <shardgraph/program/print_graphviz.hpp>
#include <shardgraph/program/print_text.hpp>

#include "catch.hpp"
#include "test_models.hpp"

namespace sg = shardgraph;
using namespace test_models;

namespace {
constexpr sg::graph mlp = megatron_mlp();
constexpr sg::graph verified = sg::passes::verify(mlp);
constexpr sg::graph propagated = sg::passes::propagate_sharding(verified);
constexpr sg::graph with_collectives = sg::passes::insert_collectives(propagated);
constexpr int tp = 1, dp = 0;

constexpr const sg::node& named(const sg::graph& g, std::string_view name, sg::op kind) {
  for (const sg::node& n : g.nodes)
    if (n.name.view() == name && n.kind == kind) return n;
  throw "test: node not found";
}
}  // namespace

TEST_CASE("verify accepts the Megatron MLP and infers global shapes", "[passes]") {
  STATIC_REQUIRE(verified.ok());
  constexpr const sg::node& h = named(verified, "mlp.c_fc", sg::op::linear);
  STATIC_REQUIRE(h.shape == sg::shape{sg::dim::batch, sg::dim::seq, sg::dim::ffn});
}

TEST_CASE("propagate_sharding derives Megatron's placements", "[passes]") {
  STATIC_REQUIRE(propagated.ok());
  constexpr const sg::node& h = named(propagated, "mlp.c_fc", sg::op::linear);
  STATIC_REQUIRE(h.spec[tp] == sg::shard<2>);  // column parallel: hidden sharded
  STATIC_REQUIRE(h.spec[dp] == sg::shard<0>);  // batch stays sharded on dp
  constexpr const sg::node& y = named(propagated, "mlp.c_proj", sg::op::linear);
  STATIC_REQUIRE(y.spec[tp] == sg::partial);   // row parallel: partial sums
  constexpr const sg::node& out = named(propagated, "y", sg::op::output);
  STATIC_REQUIRE(out.required[0][tp] == sg::replicate);
  STATIC_REQUIRE(out.required[0][dp] == sg::replicate);
}

TEST_CASE("insert_collectives: one all_reduce on tp for the MLP, one all_gather on dp for the output", "[passes]") {
  STATIC_REQUIRE(with_collectives.ok());
  STATIC_REQUIRE(with_collectives.count(sg::op::all_reduce, "tp") == 1);
  STATIC_REQUIRE(with_collectives.count(sg::op::all_reduce, "dp") == 0);
  STATIC_REQUIRE(with_collectives.count(sg::op::all_gather, "dp") == 1);
  STATIC_REQUIRE(with_collectives.count(sg::op::all_gather, "tp") == 0);
  constexpr const sg::node& ar = named(with_collectives, "mlp.c_proj", sg::op::all_reduce);
  STATIC_REQUIRE(with_collectives[ar.reason].kind == sg::op::output);  // needed by the output 'y'
}

TEST_CASE("insert_collectives: reduce_scatter, all_to_all and local slices where placements change", "[passes]") {
  constexpr sg::graph rs = sg::compile_graph(row_parallel_to_sequence_shard()).nodes;
  STATIC_REQUIRE(rs.ok());
  STATIC_REQUIRE(rs.count(sg::op::reduce_scatter, "tp") == 1);
  STATIC_REQUIRE(rs.count(sg::op::all_reduce) == 0);
  constexpr sg::graph a2a = sg::compile_graph(sequence_to_hidden()).nodes;
  STATIC_REQUIRE(a2a.ok());
  STATIC_REQUIRE(a2a.count(sg::op::all_to_all, "tp") == 1);
  STATIC_REQUIRE(a2a.count(sg::op::all_gather, "tp") == 1);  // the output is gathered afterwards
  // A Replicate input meeting a tp-sharded weight along its contraction dim is sliced locally.
  constexpr sg::program p = sg::compile_graph([] {
    using namespace sg::dim;
    sg::builder<Mesh> g;
    auto x = g.input("x", {batch, model}, sg::dtype::f32);
    auto w = g.param("w", {model, ffn}, sg::on<"tp">(sg::shard<0>));
    sg::output(sg::linear(x, w), "y");
    return g.finish();
  }());
  STATIC_REQUIRE(p.count(sg::op::local_slice, "tp") == 1);
  STATIC_REQUIRE(p.count(sg::op::all_reduce, "tp") == 1);
}

TEST_CASE("fuse merges bias + gelu and bias + residual add into single steps", "[passes]") {
  static constexpr sg::program p = sg::compile_graph(megatron_mlp_with_bias());
  STATIC_REQUIRE(p.ok());
  STATIC_REQUIRE(p.count(sg::step_kind::fused) == 2);
  constexpr const sg::node& gelu = named(p.nodes, "gelu", sg::op::gelu);
  STATIC_REQUIRE(gelu.group >= 0);
  STATIC_REQUIRE(p.nodes[gelu.group].kind == sg::op::add_bias);
}

TEST_CASE("GPT-2 and LLaMA: the block holds Megatron's two tp all_reduces", "[passes][models]") {
  constexpr sg::program gpt2 = sg::compile_graph(sg::models::gpt2<Mesh>());
  STATIC_REQUIRE(gpt2.ok());
  int in_block = 0;
  for (const sg::node& n : gpt2.nodes.nodes) in_block += (n.kind == sg::op::all_reduce && n.region >= 0) ? 1 : 0;
  REQUIRE(in_block == 2);
  STATIC_REQUIRE(gpt2.count(sg::op::all_reduce, "dp") == 1);  // the loss
  constexpr sg::program llama = sg::compile_graph(sg::models::llama<Mesh>());
  STATIC_REQUIRE(llama.ok());
  STATIC_REQUIRE(llama.count(sg::op::all_reduce, "tp") == 3);  // embedding + attention + MLP
}

TEST_CASE("the printed program names each collective, its tensor and the op that needed it", "[passes][program]") {
  constexpr sg::program p = sg::compile_graph(megatron_mlp());
  std::ostringstream text;
  sg::print_program(text, p);
  CHECK(text.str().find("all_reduce @tp") != std::string::npos);
  CHECK(text.str().find("<- output 'y'") != std::string::npos);
  CHECK(text.str().find("(batch/dp, seq, ffn/tp)") != std::string::npos);
  std::ostringstream dot;
  sg::print_graphviz(dot, p);
  CHECK(dot.str().rfind("digraph program {", 0) == 0);
  CHECK(dot.str().find("all_reduce @tp") != std::string::npos);
}

TEST_CASE("a graph with an error keeps the first diagnostic through every pass", "[passes]") {
  sg::graph g = [] {
    using namespace sg::dim;
    sg::builder<Mesh> b;
    auto x = b.input("x", {batch, model}, sg::dtype::f32);
    auto w = b.param("w", {ffn, model});  // wrong: (in, out) expects model first
    sg::output(sg::linear(x, w), "y");
    return b.finish();
  }();
  sg::program p = sg::compile_graph(g);
  REQUIRE_FALSE(p.ok());
  CHECK(p.error().find("shardgraph: linear 'w'") == 0);
  CHECK(p.error().find("transpose_b") != std::string_view::npos);
}
