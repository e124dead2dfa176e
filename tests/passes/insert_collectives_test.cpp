// insert_collectives: the collective each placement change needs, and for whom.
#include "catch.hpp"
#include "test_models.hpp"

namespace sg = shardgraph;
using namespace test_models;

TEST_CASE("insert_collectives: one all_reduce on tp for the MLP, one all_gather on dp for the output", "[passes]") {
  STATIC_REQUIRE(with_collectives.ok());
  STATIC_REQUIRE(with_collectives.count(sg::op::all_reduce, "tp") == 1);
  STATIC_REQUIRE(with_collectives.count(sg::op::all_reduce, "dp") == 0);
  STATIC_REQUIRE(with_collectives.count(sg::op::all_gather, "dp") == 1);
  STATIC_REQUIRE(with_collectives.count(sg::op::all_gather, "tp") == 0);
  constexpr const sg::node& ar = named(with_collectives, "mlp.c_proj", sg::op::all_reduce);
  STATIC_REQUIRE(with_collectives[ar.reason].kind == sg::op::output);  // needed by the output 'y'
}

// The index of the first node of kind k on `axis`.
constexpr int first_of(const sg::graph& g, sg::op k, std::string_view axis) {
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == k && g.axes.name(g[i].axis) == axis) return i;
  return -1;
}

TEST_CASE("insert_collectives: the order moving fewer bytes, a reduction before a gather", "[passes]") {
  // The MLP's output, Shard<0> on dp and Partial on tp, is all-reduced on tp while each rank holds
  // its rows, then gathered on dp (the other order all-reduces the whole batch).
  constexpr int reduce = first_of(with_collectives, sg::op::all_reduce, "tp");
  constexpr int gather = first_of(with_collectives, sg::op::all_gather, "dp");
  STATIC_REQUIRE(reduce >= 0);
  STATIC_REQUIRE(gather == reduce + 1);
  STATIC_REQUIRE(with_collectives[gather].inputs[0] == reduce);
  // A slice comes before a gather, unless it would shard one dimension on two axes: moving the
  // batch from dp to tp gathers it on dp first.
  constexpr sg::graph moved = sg::compile_graph([] {
    using namespace sg::dim;
    sg::builder<Mesh> g;
    auto x = g.input("x", {batch, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
    auto y = sg::redistribute(x, sg::on<"dp">(sg::replicate), sg::on<"tp">(sg::shard<0>));
    sg::output(y, "y");
    return g.finish();
  }()).nodes;
  STATIC_REQUIRE(moved.ok());
  constexpr int gathered = first_of(moved, sg::op::all_gather, "dp");
  constexpr int sliced = first_of(moved, sg::op::local_slice, "tp");
  STATIC_REQUIRE(gathered >= 0);
  STATIC_REQUIRE(sliced == gathered + 1);
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

// The dp all_gather that redistribute once made for an axis it did not name is gone: the one
// left gathers the batch for the output, after the last gelu.
constexpr int gathered_for(const sg::graph& g, std::string_view axis) {
  for (const sg::node& n : g.nodes)
    if (n.kind == sg::op::all_gather && g.axes.name(n.axis) == axis) return n.reason;
  return -1;
}
TEST_CASE("insert_collectives: redistribute gathers nothing on an axis it does not name", "[passes]") {
  static constexpr sg::graph g = sg::compile_graph(redistribute_on_tp_only()).nodes;
  STATIC_REQUIRE(g.ok());
  STATIC_REQUIRE(g.count(sg::op::all_to_all, "tp") == 1);
  STATIC_REQUIRE(g.count(sg::op::all_gather, "dp") == 1);
  STATIC_REQUIRE(g[gathered_for(g, "dp")].kind == sg::op::output);
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
  // embedding, attention and MLP; the loss's statistics and sums (vocabulary parallel)
  STATIC_REQUIRE(llama.count(sg::op::all_reduce, "tp") == 5);
}

// The first node of kind k, and the number of all_gathers on `axis` that no output asked for.
constexpr int first_node(const sg::program& p, sg::op k) {
  for (int i = 0; i < p.nodes.size(); ++i)
    if (p.nodes[i].kind == k) return i;
  return -1;
}
constexpr int gathers_for_compute(const sg::program& p, std::string_view axis) {
  int count = 0;
  for (const sg::node& n : p.nodes.nodes)
    count += n.kind == sg::op::all_gather && p.nodes.axes.name(n.axis) == axis && n.reason >= 0 &&
             p.nodes[n.reason].kind != sg::op::output;
  return count;
}

TEST_CASE("The vocabulary-parallel cross-entropy reduces statistics instead of gathering logits", "[passes][models]") {
  constexpr sg::program gpt2 = sg::compile_graph(sg::models::gpt2<Mesh>(), sg::training{});
  STATIC_REQUIRE(gpt2.ok());
  // Only the "logits" output gathers the logits (a step that returns the loss leaves it out).
  STATIC_REQUIRE(gathers_for_compute(gpt2, "tp") == 0);
  STATIC_REQUIRE(gpt2.count(sg::op::vocab_statistics) == 1);
  STATIC_REQUIRE(gpt2.count(sg::op::vocab_exp_sum) == 1);
  STATIC_REQUIRE(gpt2.count(sg::op::vocab_log_sum_exp) == 1);  // read by the loss and its gradient
  constexpr int loss = first_node(gpt2, sg::op::cross_entropy);
  STATIC_REQUIRE(gpt2.nodes[loss].input_count == 4);
  STATIC_REQUIRE(gpt2.nodes[gpt2.nodes[loss].inputs[0]].spec[1].is_shard(2));  // its logits: vocab on tp
  constexpr int gradient = first_node(gpt2, sg::op::cross_entropy_grad);
  STATIC_REQUIRE(gpt2.nodes[gradient].inputs[3] == gpt2.nodes[loss].inputs[2]);  // the same lse
  // A whole vocabulary keeps the one fused cross_entropy.
  constexpr sg::program whole = sg::compile_graph(sg::models::gpt2<Mesh>({.tensor_axis = ""}), sg::training{});
  STATIC_REQUIRE(whole.count(sg::op::vocab_statistics) == 0);
  STATIC_REQUIRE(whole.nodes[first_node(whole, sg::op::cross_entropy)].input_count == 2);
}
