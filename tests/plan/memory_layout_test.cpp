// plan::plan_memory and its passes on small programs written here: which values share the arena
// (and that values live at one step never overlap there), a gradient written in place, a block's
// result carried into its next layer's input, an output left out of memory_options.outputs unread,
// batched products' operands at equal strides, and the arena's bytes against a hand count.
#include <algorithm>
#include <array>
#include <optional>
#include <string_view>
#include <vector>

#include <shardgraph/passes/compile.hpp>
#include <shardgraph/plan/memory_layout.hpp>
#include <shardgraph/plan/plan_step_fusion.hpp>
#include <shardgraph/shardgraph.hpp>

#include "catch.hpp"
#include "test_programs.hpp"

namespace sg = shardgraph;
namespace mp = shardgraph::memory_plan;

namespace {

using plan_test_programs::Mesh;
using plan_test_programs::residual_blocks;

// x -> linear(w1) -> linear(w2) -> linear(w3) -> output "y": three values of one size in a row.
constexpr sg::graph three_products() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto w1 = g.param("w1", {model, model});
  auto w2 = g.param("w2", {model, model});
  auto w3 = g.param("w3", {model, model});
  sg::output(sg::linear(sg::linear(sg::linear(x, w1), w2), w3), "y");
  return g.finish();
}

// h = linear(x, w); outputs "y" = linear(h, w_out) and "extra" = gelu(h).
constexpr sg::graph two_outputs() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto w = g.param("w", {model, model});
  auto w_out = g.param("w_out", {model, model});
  auto h = sg::linear(x, w);
  sg::output(sg::linear(h, w_out), "y");
  sg::output(sg::gelu(h), "extra");
  return g.finish();
}

// repeat "h" { h + linear(h, a) + linear(h, b) + linear(h, c) }: three products of one input.
constexpr sg::graph three_branches() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i32);
  auto w_out = g.param("w_out", {model, vocab});
  auto h = sg::repeat("h", x, [](sg::graph_builder& b, sg::tensor t) {
    auto a = b.param("a", {model, model});
    auto c = b.param("b", {model, model});
    auto d = b.param("c", {model, model});
    return t + sg::linear(t, a) + sg::linear(t, c) + sg::linear(t, d);
  });
  sg::output(sg::cross_entropy(sg::linear(h, w_out), targets), "loss");
  return g.finish();
}

constexpr sg::program products_program = sg::compile<three_products, sg::inference{}>();
constexpr sg::program outputs_program = sg::compile<two_outputs, sg::inference{}>();
const sg::program& residual_training = plan_test_programs::untied;
const sg::program& residual_inference = plan_test_programs::untied_inference;
constexpr sg::program branches_training = sg::compile<three_branches, sg::training{}>();
constexpr sg::program residual_recomputed =
    sg::compile<residual_blocks<false>, sg::training{.recompute = sg::recompute::full}>();

struct no_fused_calls {
  using buffer = int;
};
struct batched_products {
  struct buffer {
    buffer at_offset(std::size_t) const { return {}; }
  };
  static const void* address(const buffer&) { return nullptr; }
  struct traits {
    static constexpr sg::compute::fused_set runs{sg::compute::fused::batched_products};
  };
};

// Batch 2, sequence 4, width 16, vocabulary 32, 3 layers, one rank: a (B, T, d) f32 value is 512 bytes.
constexpr std::int64_t layers = 3;
constexpr std::size_t d_wide = 2 * 4 * 16 * 4;

sg::local_layout layout_of(const sg::program& p) {
  sg::model_sizes sizes;
  sizes.set(sg::size_symbol::batch, 2).set(sg::size_symbol::seq, 4).set(sg::size_symbol::model, 16);
  sizes.set(sg::size_symbol::vocab, 32).set(sg::size_symbol::layers, layers);
  const sg::mesh_shape mesh{{"dp", 1}, {"pp", 1}};
  return sg::local_layout(p, sizes, mesh, mesh.coordinates(p.nodes.axes, 0));
}

// A program planned as bind plans it: step index, local shapes, the fused calls of Backend's
// declared abilities, then the memory plan.
template <class Backend = no_fused_calls>
struct planned {
  const sg::program& p;
  sg::memory_options options;
  sg::plan::step_index steps = sg::plan::index_steps(p, layers);
  sg::local_layout layout = layout_of(p);
  std::vector<bool> scattered_grad{};  // no buckets
  sg::plan::step_fusion fused = plan_fusion();
  sg::plan::memory_layout memory = sg::plan::plan_memory(inputs());

  planned(const sg::program& program, sg::memory_options o = {}) : p(program), options(std::move(o)) {}
  planned(const planned&) = delete;

  // The fused calls of Backend's declared abilities; the producers they move go into `steps`.
  sg::plan::step_fusion plan_fusion() {
    const std::size_t n = static_cast<std::size_t>(p.nodes.size());
    std::vector<bool> again(n, false), kept(n, false);
    for (int i = 0; i < p.nodes.size(); ++i) {
      const sg::op kind = p.nodes[i].kind;
      again[static_cast<std::size_t>(i)] = sg::plan::recomputed(p, i);
      kept[static_cast<std::size_t>(i)] = kind != sg::op::parameter && kind != sg::op::param_grad &&
                                          sg::plan::per_layer(p, steps, scattered_grad, i);
    }
    sg::plan::step_fusion f = sg::plan::plan_step_fusion(
        {.program = p, .steps = steps, .layout = layout, .recomputed = again, .kept_per_layer = kept},
        sg::plan::traits_of<Backend>(sg::compute::fused_kinds_run_by<Backend>()));
    sg::plan::apply_producer_moves(f, steps);
    return f;
  }

  sg::plan::memory_inputs inputs() const {
    return {.program = p,
            .steps = steps,
            .layout = layout,
            .fused = fused,
            .options = options,
            .scattered_grad = scattered_grad,
            .pipelined = false,
            .views = true};
  }
  int node(std::string_view name, sg::op kind) const {
    for (int i = 0; i < p.nodes.size(); ++i)
      if (p.nodes[i].name.view() == name && p.nodes[i].kind == kind) return i;
    FAIL("no node " << name);
    return -1;
  }
  const sg::plan::value_memory& of(int i) const { return memory.values[static_cast<std::size_t>(i)]; }
};

// Fails unless the arena's values that are live at one step lie apart, apart from the pairs the
// plan puts together on purpose (a cross-entropy gradient over its logits).
template <class Backend>
void check_live_values_apart(const planned<Backend>& r) {
  const sg::graph& g = r.p.nodes;
  const sg::plan::memory_inputs in = r.inputs();
  const sg::plan::materialized_values m =
      sg::plan::plan_materialized(r.p, r.steps, r.fused, r.options.outputs);
  const std::vector<int> written_into = sg::plan::plan_gradients_in_place(in, m.materialized);
  const sg::plan::carried_values carried = sg::plan::plan_carried_values(in, m, written_into);
  const sg::plan::arena_inputs a{m, written_into, carried};
  std::vector<int> shared;
  for (int i = 0; i < g.size(); ++i)
    if (sg::plan::shares_arena(in, a, i)) shared.push_back(i);
  for (int i : shared) {
    REQUIRE(r.of(i).kind == sg::plan::storage::arena);
    CHECK(r.of(i).offset % mp::alignment == 0);
    CHECK(r.of(i).offset + sg::plan::lifetime(in, a, i).bytes <= r.memory.arena_bytes);
  }
  for (int i : shared)
    for (int j : shared) {
      if (i >= j || !mp::live_together(sg::plan::lifetime(in, a, i), sg::plan::lifetime(in, a, j))) continue;
      if (g[j].kind == sg::op::cross_entropy_grad && g[j].inputs[0] == i) continue;  // in place
      CAPTURE(g[i].name.view(), sg::op_name(g[i].kind), g[j].name.view(), sg::op_name(g[j].kind));
      const std::size_t a_end = r.of(i).offset + sg::plan::lifetime(in, a, i).bytes;
      const std::size_t b_end = r.of(j).offset + sg::plan::lifetime(in, a, j).bytes;
      CHECK((a_end <= r.of(j).offset || b_end <= r.of(i).offset));
    }
}

}  // namespace

TEST_CASE("plan_memory: values live apart share the arena's bytes, a hand count of three products",
          "[plan][memory]") {
  // y = ((x w1) w2) w3: steps p1, p2, p3 and the output's copy. p1 is live [p1, p2], p2 [p2, p3],
  // p3 to the end (the output is a view of it). p1 and p3 are never live together: one 512-byte
  // slot each for {p1, p3} and p2, so the arena holds 2 x 512 bytes.
  const planned<> r(products_program);
  const sg::graph& g = products_program.nodes;
  const int y = r.node("y", sg::op::output), p3 = g[y].inputs[0], p2 = g[p3].inputs[0], p1 = g[p2].inputs[0];
  for (int v : {p1, p2, p3, y}) CHECK(r.of(v).kind == sg::plan::storage::arena);
  CHECK(r.of(r.node("x", sg::op::input)).kind == sg::plan::storage::own);
  CHECK(r.of(r.node("w1", sg::op::parameter)).kind == sg::plan::storage::own);
  CHECK(r.of(p1).offset == r.of(p3).offset);
  CHECK(r.of(p2).offset != r.of(p1).offset);
  CHECK(r.of(y).offset == r.of(p3).offset);  // the output's copy writes the bytes it reads
  CHECK(r.memory.arena_bytes == 2 * d_wide);
  CHECK(r.memory.arena_shared == 3);
  CHECK(r.memory.arena_values_bytes == static_cast<std::int64_t>(3 * d_wide));
  check_live_values_apart(r);

  const planned<> apart(products_program, {.reuse = false});
  CHECK(apart.memory.arena_bytes == 0);
  for (int v : {p1, p2, p3, y}) CHECK(apart.of(v).kind == sg::plan::storage::own);
}

TEST_CASE("plan_memory: a training step's arena holds no two values live at one step in one place",
          "[plan][memory]") {
  const planned<> r(residual_training);
  CHECK(r.memory.arena_bytes > 0);
  check_live_values_apart(r);
  // The loss's gradient of the logits is written over them (their last reader is its step).
  const sg::graph& g = residual_training.nodes;
  int gradient = -1;
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == sg::op::cross_entropy_grad) gradient = i;
  REQUIRE(gradient >= 0);
  CHECK(r.of(gradient).kind == sg::plan::storage::arena);
  CHECK(r.of(gradient).offset == r.of(g[gradient].inputs[0]).offset);
}

TEST_CASE("plan_memory: a weight's gradient is written into its param_grad", "[plan][memory]") {
  const planned<> r(residual_training);
  const sg::graph& g = residual_training.nodes;
  const int w_out = r.node("w_out", sg::op::parameter);
  int grad = -1;
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == sg::op::param_grad && g[i].origin == w_out) grad = i;
  REQUIRE(grad >= 0);
  const int from = g[grad].inputs[0];
  CHECK(g[from].kind == sg::op::linear_weight_grad);
  CHECK(r.of(from).written_into == grad);
  CHECK(r.of(from).kind == sg::plan::storage::elsewhere);
  CHECK(r.memory.place_of(from, 0).node == grad);
  CHECK(r.of(grad).kind == sg::plan::storage::own);
  CHECK(r.memory.gradients_in_place >= 1);

  const planned<> copied(residual_training, {.reuse = false});  // each in its own value, then copied
  CHECK(copied.of(from).written_into == -1);
  CHECK(copied.memory.place_of(from, 0).node == from);
  CHECK(copied.memory.gradients_in_place == 0);
}

TEST_CASE("plan_memory: a block's result is carried into its next layer's input", "[plan][memory]") {
  SECTION("training: the next layer's kept input, the loop's value at the last") {
    const planned<> r(residual_training);
    const sg::plan::step_index& idx = r.steps;
    const int block = idx.forward_begin_node, end = idx.forward_end_node,
              result = residual_training.nodes[end].inputs[0];
    CHECK(r.of(block).per_layer);
    CHECK(r.of(result).carried_into == block);
    CHECK(r.of(result).kind == sg::plan::storage::elsewhere);
    for (std::int64_t l = 0; l + 1 < layers; ++l) {
      CHECK(r.memory.place_of(result, l).node == block);
      CHECK(r.memory.place_of(result, l).layer == l + 1);
    }
    CHECK(r.memory.place_of(result, layers - 1).node == end);
    // The block's input, the first product, is written where layer 0 reads it.
    const int first = residual_training.nodes[block].inputs[0];
    CHECK(r.of(first).kind == sg::plan::storage::elsewhere);
    CHECK(r.memory.place_of(first, 2).node == block);
    CHECK(r.memory.place_of(first, 2).layer == 0);
  }
  SECTION("inference: the input alternates between the block's memory and the result's") {
    const planned<> r(residual_inference);
    const sg::plan::step_index& idx = r.steps;
    const int block = idx.forward_begin_node, end = idx.forward_end_node;
    const int result = residual_inference.nodes[end].inputs[0];
    CHECK(!r.of(block).per_layer);
    CHECK(r.of(block).carry_partner == result);
    CHECK(r.memory.place_of(block, 0).node == block);
    CHECK(r.memory.place_of(block, 1).node == result);
    CHECK(r.memory.place_of(block, 2).node == block);
    CHECK(r.memory.place_of(result, 0).node == result);    // layer 1's input
    CHECK(r.memory.place_of(result, 1).node == block);     // layer 2's input
    CHECK(r.memory.place_of(result, 2).node == end);       // the last: the loop's value
    CHECK(r.of(block).kind == sg::plan::storage::own);     // a block's value keeps its own memory
    CHECK(r.of(result).kind == sg::plan::storage::arena);  // live through the whole loop there
  }
}

TEST_CASE("plan_memory: an output memory_options.outputs leaves out is not computed", "[plan][memory]") {
  const sg::graph& g = outputs_program.nodes;
  const planned<> all(outputs_program);
  const planned<> y_only(outputs_program, {.outputs = {"y"}});
  const int extra = y_only.node("extra", sg::op::output), y = y_only.node("y", sg::op::output);
  const int gelu = g[extra].inputs[0], h = g[gelu].inputs[0];
  CHECK(!all.memory.unread[static_cast<std::size_t>(extra)]);
  CHECK(!all.memory.unread[static_cast<std::size_t>(gelu)]);
  CHECK(y_only.memory.unread[static_cast<std::size_t>(extra)]);
  CHECK(y_only.memory.unread[static_cast<std::size_t>(gelu)]);  // only the left-out output reads it
  CHECK(!y_only.memory.unread[static_cast<std::size_t>(h)]);    // y reads it too
  CHECK(!y_only.memory.unread[static_cast<std::size_t>(y)]);
  CHECK(y_only.of(extra).kind == sg::plan::storage::none);
  CHECK(y_only.of(gelu).kind == sg::plan::storage::none);
  CHECK(y_only.memory.arena_bytes < all.memory.arena_bytes);
  CHECK(sg::plan::kept_output(outputs_program, {"y"}, y));
  CHECK(!sg::plan::kept_output(outputs_program, {"y"}, extra));
  CHECK_THROWS_WITH(
      sg::plan::check_output_names(outputs_program, {"z"}),
      sg::testing::ContainsSubstring("'z' is not an output of the program (its outputs: y, extra)"));
}

TEST_CASE("plan_memory: batched products' operands lie at one stride", "[plan][memory]") {
  const planned<batched_products> r(branches_training);
  const sg::graph& g = branches_training.nodes;
  // The block's three weights, kept per layer, are a layer block: each layer's holds a, b, c at
  // strides of one d x d f32 weight (1024 bytes, a multiple of the alignment). (The input
  // gradients' products, batched too, read them in the other order: the last group placed wins.)
  const int a = r.node("h.a", sg::op::parameter), b = r.node("h.b", sg::op::parameter),
            c = r.node("h.c", sg::op::parameter);
  const int group = r.of(a).group;
  REQUIRE(group >= 0);
  const sg::plan::layer_block& weights = r.memory.layer_blocks[static_cast<std::size_t>(group)];
  CHECK(
      std::is_permutation(weights.members.begin(), weights.members.end(), std::vector<int>{a, b, c}.begin()));
  CHECK(weights.stride == 16 * 16 * 4);
  CHECK(weights.block_numel == 3 * 16 * 16);
  for (std::size_t k = 0; k < r.memory.layer_blocks.size(); ++k)
    for (std::size_t m = 0; m < r.memory.layer_blocks[k].members.size(); ++m) {
      const sg::plan::value_memory& v = r.of(r.memory.layer_blocks[k].members[m]);
      CHECK(v.kind == sg::plan::storage::layer_block);
      CHECK(v.per_layer);
      if (v.group == static_cast<int>(k)) CHECK(v.offset == m * r.memory.layer_blocks[k].stride);
    }
  // Their results share the arena at one stride from the first's.
  int first = -1;
  for (int i = 0; i < g.size(); ++i)
    if (first < 0 && g[i].kind == sg::op::linear && g[i].inputs[1] == a) first = i;
  REQUIRE(first >= 0);
  const std::vector<int>& batch = r.fused.batched_with[static_cast<std::size_t>(first)];
  REQUIRE(batch.size() == 2);
  CHECK(r.of(first).kind == sg::plan::storage::arena);
  for (std::size_t m = 0; m < batch.size(); ++m)
    CHECK(r.of(batch[m]).offset == r.of(first).offset + (m + 1) * d_wide);
  check_live_values_apart(r);
}

TEST_CASE("per_layer: a training block keeps per layer what the backward reads, unless recomputed",
          "[plan][memory]") {
  const auto block_values = [](const sg::program& p) {
    const sg::graph& g = p.nodes;
    int w = -1, product = -1, gelu = -1, grad = -1;
    for (int i = 0; i < g.size(); ++i) {
      if (g[i].kind == sg::op::parameter && g[i].name.view() == "h.w") w = i;
      if (product < 0 && g[i].kind == sg::op::linear && g[i].input_count > 1 && g[i].inputs[1] == w)
        product = i;
      if (gelu < 0 && g[i].kind == sg::op::gelu && g[i].inputs[0] == product) gelu = i;
      if (g[i].kind == sg::op::param_grad && g[i].origin == w) grad = i;
    }
    REQUIRE(std::min({w, product, gelu, grad}) >= 0);
    return std::array<int, 4>{w, product, gelu, grad};
  };
  const std::vector<bool> none;
  {
    const sg::program& p = residual_training;
    const sg::plan::step_index idx = sg::plan::index_steps(p, layers);
    const auto [w, product, gelu, grad] = block_values(p);
    CHECK(sg::plan::per_layer(p, idx, none, w));
    CHECK(sg::plan::per_layer(p, idx, none, product));  // GELU's gradient reads it in the backward
    CHECK(!sg::plan::per_layer(p, idx, none, gelu));    // only the residual sum reads it, in its layer
    CHECK(sg::plan::per_layer(p, idx, none, idx.forward_begin_node));  // the block's input
    CHECK(sg::plan::per_layer(p, idx, none, grad));
    std::vector<bool> scattered(static_cast<std::size_t>(p.nodes.size()), false);
    scattered[static_cast<std::size_t>(grad)] = true;  // a bucket reduce-scatters it: one buffer reused
    CHECK(!sg::plan::per_layer(p, idx, scattered, grad));
    CHECK(!sg::plan::recomputed(p, product));
    CHECK(sg::plan::recomputed_steps(p).empty());
  }
  {
    const sg::program& p = residual_recomputed;
    const sg::plan::step_index idx = sg::plan::index_steps(p, layers);
    const auto [w, product, gelu, grad] = block_values(p);
    CHECK(sg::plan::recomputed(p, product));
    CHECK(sg::plan::recomputed(p, gelu));
    CHECK(!sg::plan::recomputed(p, w));
    CHECK(!sg::plan::per_layer(p, idx, none, product));  // computed again in each backward iteration
    CHECK(sg::plan::per_layer(p, idx, none, idx.forward_begin_node));
    const std::vector<std::size_t> steps = sg::plan::recomputed_steps(p);
    CHECK(std::find(steps.begin(), steps.end(), idx.producer_step[static_cast<std::size_t>(product)]) !=
          steps.end());
    for (std::size_t s : steps) CHECK(idx.phase_of(s) == sg::plan::phase::forward_block);
    // Live again from the backward block's start: two ranges, the second from its loop_begin step.
    const planned<> r(p);
    const sg::plan::memory_inputs in = r.inputs();
    const sg::plan::materialized_values m = sg::plan::plan_materialized(p, r.steps, r.fused, {});
    const std::vector<int> written_into = sg::plan::plan_gradients_in_place(in, m.materialized);
    const sg::plan::carried_values carried = sg::plan::plan_carried_values(in, m, written_into);
    const sg::plan::arena_inputs a{m, written_into, carried};
    REQUIRE(sg::plan::shares_arena(in, a, product));
    const mp::value live = sg::plan::lifetime(in, a, product);
    REQUIRE(live.live.size() == 2);
    CHECK(live.live[1].first == static_cast<std::size_t>(idx.backward_begin_step));
    check_live_values_apart(r);
  }
}
