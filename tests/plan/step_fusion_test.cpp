// plan::plan_step_fusion on five small training programs written here, each ending in the
// cross-entropy loss training needs: a biased MLP, three biased products of one input, a layer norm,
// attention between split and merged heads, and a bare classifier. With no fused call declared
// every step runs; with each trait on, the steps listed by hand are taken over (their indices are
// looked up by name and kind, in the order autodiff emits them), and taken_over_by, written_by_call
// and producer_moves agree.
#include <map>
#include <string_view>
#include <vector>

#include <shardgraph/passes/compile.hpp>
#include <shardgraph/plan/plan_step_fusion.hpp>
#include <shardgraph/shardgraph.hpp>

#include "catch.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
using sg::plan::backend_traits;
using sg::compute::fused;
using sg::plan::step_fusion;
using written = step_fusion::written_value;

// The loss a training program needs: cross_entropy(y w_out, targets).
constexpr void add_loss(sg::builder<Mesh>& g, sg::tensor y) {
  auto targets = g.input("targets", {sg::dim::batch, sg::dim::seq}, sg::dtype::i32);
  auto w_out = g.param("w_out", {sg::dim::model, sg::dim::vocab});
  sg::output(sg::cross_entropy(sg::linear(y, w_out), targets), "loss");
}

// x + linear(gelu(linear(x, w, b)), w2)
constexpr sg::graph biased_mlp() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto h = sg::gelu(sg::linear(x, g.param("w", {model, ffn}), g.param("b", {ffn})));
  add_loss(g, sg::linear(h, g.param("w2", {ffn, model})) + x);
  return g.finish();
}

// q * k + v, each a biased (model, model) product of x
constexpr sg::graph three_products() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto q = sg::linear(x, g.param("q", {model, model}), g.param("q_bias", {model}));
  auto k = sg::linear(x, g.param("k", {model, model}), g.param("k_bias", {model}));
  auto v = sg::linear(x, g.param("v", {model, model}), g.param("v_bias", {model}));
  add_loss(g, q * k + v);
  return g.finish();
}

// linear(layer_norm(x, ln.weight, ln.bias), w)
constexpr sg::graph normed() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  auto h = sg::layer_norm(x, g.param("ln.weight", {model}), g.param("ln.bias", {model}));
  add_loss(g, sg::linear(h, g.param("w", {model, model})));
  return g.finish();
}

// linear(merge_heads(attention(split_heads(x q), split_heads(x k), split_heads(x v))), o)
constexpr sg::graph attention_block() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  const sg::extent attn = heads * head_dim;
  auto q = sg::split_heads(sg::linear(x, g.param("q", {model, attn})));
  auto k = sg::split_heads(sg::linear(x, g.param("k", {model, attn})));
  auto v = sg::split_heads(sg::linear(x, g.param("v", {model, attn})));
  add_loss(g, sg::linear(sg::merge_heads(sg::attention(q, k, v)), g.param("o", {attn, model})));
  return g.finish();
}

// cross_entropy(x w, targets)
constexpr sg::graph classifier() {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  add_loss(g, g.input("x", {batch, seq, model}, sg::dtype::f32));
  return g.finish();
}

constexpr sg::program mlp_program = sg::compile<biased_mlp, sg::training{}>();
constexpr sg::program mlp_inference = sg::compile<biased_mlp, sg::inference{}>();
constexpr sg::program products_program = sg::compile<three_products, sg::training{}>();
constexpr sg::program norm_program = sg::compile<normed, sg::training{}>();
constexpr sg::program attention_program = sg::compile<attention_block, sg::training{}>();
constexpr sg::program classifier_program = sg::compile<classifier, sg::training{}>();

sg::model_sizes small_sizes() {
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, 2).set(sg::size_symbol::seq, 4).set(sg::size_symbol::model, 8);
  s.set(sg::size_symbol::ffn, 16).set(sg::size_symbol::heads, 2).set(sg::size_symbol::head_dim, 4);
  s.set(sg::size_symbol::vocab, 10);
  return s;
}

// A program on one rank with the inputs the fusion plan reads: nothing recomputed, the nodes of
// `kept_per_layer` kept per layer (as a repeat block's training keeps them), nothing else.
struct fusion_case {
  explicit fusion_case(const sg::program& program)
      : p(program),
        steps(sg::plan::index_steps(program, 1)),
        layout(program, small_sizes(), sg::mesh_shape{{"dp", 1}, {"tp", 1}}, {0, 0}) {
    REQUIRE(program.ok());
  }
  step_fusion plan(const backend_traits& traits, const std::vector<int>& kept_per_layer = {},
                   bool pipelined = false) const {
    const std::size_t n = static_cast<std::size_t>(p.nodes.size());
    std::vector<bool> kept(n, false);
    for (int i : kept_per_layer) kept[static_cast<std::size_t>(i)] = true;
    return sg::plan::plan_step_fusion({.program = p,
                                       .steps = steps,
                                       .layout = layout,
                                       .recomputed = std::vector<bool>(n, false),
                                       .kept_per_layer = kept,
                                       .pipelined = pipelined},
                                      traits);
  }
  // The one node called `name` of kind `kind`.
  int named(std::string_view name, sg::op kind) const {
    int found = -1, count = 0;
    for (int i = 0; i < p.nodes.size(); ++i)
      if (p.nodes[i].name.view() == name && p.nodes[i].kind == kind) found = i, ++count;
    INFO(name);
    REQUIRE(count == 1);
    return found;
  }
  // The one reader of node v of kind `kind`.
  int reader(int v, sg::op kind) const {
    int found = -1, count = 0;
    for (int r : steps.readers[static_cast<std::size_t>(v)])
      if (p.nodes[r].kind == kind) found = r, ++count;
    INFO(sg::op_name(kind));
    REQUIRE(count == 1);
    return found;
  }
  std::size_t step_of(int i) const { return steps.producer_step[static_cast<std::size_t>(i)]; }

  const sg::program& p;
  sg::plan::step_index steps;
  sg::local_layout layout;
};

std::size_t at(int i) { return static_cast<std::size_t>(i); }

// node -> the node whose call writes it, for every node taken over
std::map<int, int> taken(const step_fusion& f) {
  std::map<int, int> m;
  for (std::size_t i = 0; i < f.taken_over_by.size(); ++i)
    if (f.taken_over_by[i] >= 0) m[static_cast<int>(i)] = f.taken_over_by[i];
  return m;
}
// node -> the step its value moves to
std::map<int, std::size_t> moved(const step_fusion& f) {
  std::map<int, std::size_t> m;
  for (const step_fusion::producer_move& w : f.producer_moves) m[w.node] = w.step;
  return m;
}
std::vector<written> written_by(const step_fusion& f, int i, bool seed_is_one = true) {
  const auto w = f.written_by(i, seed_is_one);
  return {w.begin(), w.end()};
}

// Every fused kind.
constexpr backend_traits every_fused_call() { return {.fused = sg::compute::fused_set::all()}; }

// A backend that runs no fused kind and whose buffers have no at_offset.
struct plain_backend {
  struct buffer {};
};

// taken_over_by and written_by_call agree: each value in a call's list is taken over by that call
// (followed to the end), each value taken over is in its taker's list (a split or merge of heads is
// held in its taker's own value instead), and a node taken over makes no call.
void check_agreement(const step_fusion& f) {
  for (std::size_t i = 0; i < f.taken_over_by.size(); ++i) {
    const int node = static_cast<int>(i);
    CAPTURE(node);
    for (const written& w : f.written_by_call[i]) CHECK(f.taken_over_by[at(w.node)] == node);
    const int by = f.taken_over_by[i];
    if (by < 0) continue;
    CHECK(f.written_by_call[i].empty());
    CHECK(f.taken_over_by[at(by)] < 0);
    if (f.stored_from[i] >= 0) continue;
    bool listed = false;
    for (const written& w : f.written_by_call[at(by)]) listed = listed || w.node == node;
    CHECK(listed);
  }
}

const sg::program* const all_programs[] = {&mlp_program,  &mlp_inference,     &products_program,
                                           &norm_program, &attention_program, &classifier_program};

}  // namespace

TEST_CASE("plan_step_fusion: with no fused kind allowed every step runs", "[plan]") {
  // The rewrite introduces every kind for any backend (the core lowers those it does not run), but
  // the saved statistics only for a backend running them, and batched products only where the core
  // can find their strides.
  constexpr sg::compute::fused_set plain = sg::plan::traits_of<plain_backend>().fused;
  STATIC_REQUIRE(plain == sg::compute::fused_set::all().without(
                              {fused::batched_products, fused::attention_saved, fused::cross_entropy_saved}));
  for (const sg::program* p : all_programs) {
    const fusion_case c(*p);
    for (const step_fusion& f : {c.plan(backend_traits{}), c.plan(sg::plan::traits_of<plain_backend>({}))}) {
      CHECK(taken(f).empty());
      CHECK(f.producer_moves.empty());
      for (int i = 0; i < p->nodes.size(); ++i) {
        CAPTURE(i);
        CHECK(f.runs(i, true));
        CHECK(f.written_by_call[at(i)].empty());
        CHECK(f.bias_epilogue_of[at(i)] < 0);
        CHECK(f.epilogue_of[at(i)].out < 0);
        CHECK(!f.token_major[at(i)]);
        CHECK(f.batched_with[at(i)].empty());
        CHECK(f.writer_of(p->nodes, i) == i);
      }
    }
  }
}

TEST_CASE("plan_step_fusion: a linear's bias and gelu in its epilogue", "[plan]") {
  const fusion_case c(mlp_program);
  const int product = c.named("w", sg::op::linear), bias = c.reader(product, sg::op::add_bias);
  const int gelu = c.reader(bias, sg::op::gelu);
  SECTION("the bias alone: the add_bias step is the product's") {
    const step_fusion f = c.plan({.fused = {fused::linear_bias}});
    CHECK(f.bias_epilogue_of[at(product)] == bias);
    CHECK(f.bias_done_by_product[at(bias)]);
    CHECK(taken(f) == std::map<int, int>{{bias, product}});
    CHECK(written_by(f, product) == std::vector<written>{{bias, product}});
    CHECK(!f.runs(bias, true));
    CHECK(f.runs(gelu, true));
  }
  SECTION("and the gelu: the product writes it, the pre-activation kept for gelu_grad as its side") {
    const step_fusion f = c.plan({.fused = {fused::linear_bias, fused::linear_epilogue}});
    CHECK(f.epilogue_of[at(product)].kind == sg::compute::product_epilogue::gelu);
    CHECK(f.epilogue_of[at(product)].out == gelu);
    CHECK(f.epilogue_of[at(product)].side == bias);
    CHECK(written_by(f, product) == std::vector<written>{{bias, product}, {gelu, product}});
    // gelu_grad(pre-activation, dy): dy is the product d.w2, written before by nothing else
    const int gelu_grad = c.reader(bias, sg::op::gelu_grad), dy = c.p.nodes[gelu_grad].inputs[1];
    CHECK(f.epilogue_of[at(dy)].kind == sg::compute::product_epilogue::gelu_grad);
    CHECK(f.epilogue_of[at(dy)].side == bias);
    CHECK(taken(f) == std::map<int, int>{{bias, product}, {gelu, product}, {gelu_grad, dy}});
    CHECK(f.producer_moves.empty());
    check_agreement(f);
  }
  SECTION("inference: the fused add_bias + gelu chain becomes the product's epilogue") {
    const fusion_case inference(mlp_inference);
    const step_fusion f = inference.plan({.fused = {fused::linear_bias, fused::linear_epilogue}});
    const sg::step& chain = inference.p.steps[inference.step_of(gelu)];
    REQUIRE(chain.kind == sg::step_kind::fused);
    CHECK(chain.first == bias);
    CHECK(f.epilogue_of[at(product)].side == -1);  // nothing else reads the pre-activation
    CHECK(f.held_in_epilogue[at(bias)]);
    CHECK(!f.runs(gelu, true));
    check_agreement(f);
  }
}

TEST_CASE("plan_step_fusion: a bias gradient written by its weight product, from its step on", "[plan]") {
  const fusion_case c(mlp_program);
  const int bias_grad = c.named("d.b", sg::op::bias_grad),
            weight_grad = c.named("d.w", sg::op::linear_weight_grad);
  REQUIRE(c.step_of(bias_grad) < c.step_of(weight_grad));
  const step_fusion f = c.plan({.fused = {fused::weight_grad_with_bias}});
  CHECK(f.bias_grad_of[at(weight_grad)] == bias_grad);
  CHECK(taken(f) == std::map<int, int>{{bias_grad, weight_grad}});
  CHECK(written_by(f, weight_grad) == std::vector<written>{{bias_grad, bias_grad}});
  CHECK(moved(f) == std::map<int, std::size_t>{{bias_grad, c.step_of(weight_grad)}});
  sg::plan::step_index moved_index = c.steps;
  sg::plan::apply_producer_moves(f, moved_index);
  CHECK(moved_index.producer_step[at(bias_grad)] == c.step_of(weight_grad));
  CHECK(moved_index.producer_step[at(weight_grad)] == c.step_of(weight_grad));
}

TEST_CASE("plan_step_fusion: q, k and v products of one input in one batched call", "[plan]") {
  const fusion_case c(products_program);
  const int q = c.named("q", sg::op::linear), k = c.named("k", sg::op::linear),
            v = c.named("v", sg::op::linear);
  const int dq = c.named("d.q", sg::op::linear_weight_grad), dk = c.named("d.k", sg::op::linear_weight_grad),
            dv = c.named("d.v", sg::op::linear_weight_grad);
  // autodiff emits v's gradients first: d.v's weight product is the first of the three
  REQUIRE(c.step_of(dv) < c.step_of(dk));
  REQUIRE(c.step_of(dk) < c.step_of(dq));
  SECTION("products alone") {
    const step_fusion f = c.plan({.fused = {fused::batched_products}});
    CHECK(f.batched_with[at(q)] == std::vector<int>{k, v});
    CHECK(f.batched_with[at(dv)] == std::vector<int>{dk, dq});
    CHECK(taken(f) == std::map<int, int>{{k, q}, {v, q}, {dk, dv}, {dq, dv}});
    CHECK(written_by(f, q) == std::vector<written>{{k, k}, {v, v}});
    CHECK(moved(f) == std::map<int, std::size_t>{
                          {k, c.step_of(q)}, {v, c.step_of(q)}, {dk, c.step_of(dv)}, {dq, c.step_of(dv)}});
    check_agreement(f);
  }
  SECTION("with their biases and bias gradients") {
    const step_fusion f =
        c.plan({.fused = {fused::linear_bias, fused::weight_grad_with_bias, fused::batched_products}});
    const int q_bias = c.reader(q, sg::op::add_bias), k_bias = c.reader(k, sg::op::add_bias),
              v_bias = c.reader(v, sg::op::add_bias);
    const int dq_bias = c.named("d.q_bias", sg::op::bias_grad),
              dk_bias = c.named("d.k_bias", sg::op::bias_grad),
              dv_bias = c.named("d.v_bias", sg::op::bias_grad);
    CHECK(f.batched_with[at(q)] == std::vector<int>{k, v});
    CHECK(f.batched_with[at(dv)] == std::vector<int>{dk, dq});
    // every bias add and bias gradient named by the call that runs: the first product's
    CHECK(taken(f) == std::map<int, int>{{k, q},
                                         {v, q},
                                         {q_bias, q},
                                         {k_bias, q},
                                         {v_bias, q},
                                         {dk, dv},
                                         {dq, dv},
                                         {dv_bias, dv},
                                         {dk_bias, dv},
                                         {dq_bias, dv}});
    CHECK(written_by(f, q) == std::vector<written>{{k, k}, {k_bias, k}, {v, v}, {v_bias, v}, {q_bias, q}});
    CHECK(
        written_by(f, dv) ==
        std::vector<written>{{dv_bias, dv_bias}, {dk, dk}, {dk_bias, dk_bias}, {dq, dq}, {dq_bias, dq_bias}});
    const std::size_t first = c.step_of(dv);
    CHECK(moved(f) == std::map<int, std::size_t>{{k, c.step_of(q)},
                                                 {v, c.step_of(q)},
                                                 {dv_bias, first},
                                                 {dk, first},
                                                 {dk_bias, first},
                                                 {dq, first},
                                                 {dq_bias, first}});
    check_agreement(f);
  }
}

TEST_CASE("plan_step_fusion: a layer norm's input, weight and bias gradients in one call", "[plan]") {
  const fusion_case c(norm_program);
  const int input_grad = c.named("d.ln", sg::op::layer_norm_grad_x);
  const int weight_grad = c.named("d.ln.weight", sg::op::layer_norm_grad_w);
  const int bias_grad = c.named("d.ln.bias", sg::op::bias_grad);
  SECTION("the weight gradient with the input gradient") {
    const step_fusion f = c.plan({.fused = {fused::norm_backward}});
    CHECK(f.weight_grad_of[at(input_grad)] == weight_grad);
    CHECK(taken(f) == std::map<int, int>{{weight_grad, input_grad}});
    CHECK(written_by(f, input_grad) == std::vector<written>{{weight_grad, weight_grad}});
    CHECK(moved(f) == std::map<int, std::size_t>{{weight_grad, c.step_of(input_grad)}});
  }
  SECTION("and the bias gradient with the weight gradient: all three at the input gradient's step") {
    const step_fusion f = c.plan({.fused = {fused::norm_weight_grad_with_bias, fused::norm_backward}});
    CHECK(f.bias_grad_of[at(weight_grad)] == bias_grad);
    CHECK(taken(f) == std::map<int, int>{{weight_grad, input_grad}, {bias_grad, input_grad}});
    CHECK(written_by(f, input_grad) ==
          std::vector<written>{{weight_grad, weight_grad}, {bias_grad, bias_grad}});
    CHECK(f.written_by_call[at(weight_grad)].empty());  // taken over: it makes no call
    CHECK(moved(f) == std::map<int, std::size_t>{{weight_grad, c.step_of(input_grad)},
                                                 {bias_grad, c.step_of(input_grad)}});
    check_agreement(f);
  }
}

TEST_CASE("plan_step_fusion: attention in the products' layout, its gradients in one call", "[plan]") {
  const fusion_case c(attention_program);
  const int q = c.named("q", sg::op::linear), k = c.named("k", sg::op::linear),
            v = c.named("v", sg::op::linear);
  const int attention = c.named("attention", sg::op::attention);
  const int split_q = c.reader(q, sg::op::split_heads), split_k = c.reader(k, sg::op::split_heads),
            split_v = c.reader(v, sg::op::split_heads), merge = c.reader(attention, sg::op::merge_heads);
  const int dq = c.reader(split_q, sg::op::attention_grad_q),
            dk = c.reader(split_q, sg::op::attention_grad_k),
            dv = c.reader(split_q, sg::op::attention_grad_v);
  const int dout = c.p.nodes[dq].inputs[3], dout_product = c.p.nodes[dout].inputs[0];
  const int merge_dq = c.reader(dq, sg::op::merge_heads), merge_dk = c.reader(dk, sg::op::merge_heads),
            merge_dv = c.reader(dv, sg::op::merge_heads);
  // Each split holds its product's value, each merge its attention call's.
  const std::map<int, int> layout_steps{{split_q, q},         {split_k, k},       {split_v, v},
                                        {dout, dout_product}, {merge, attention}, {merge_dq, dq},
                                        {merge_dk, dk},       {merge_dv, dv}};
  SECTION("token-major: no split or merge of heads runs") {
    const step_fusion f = c.plan({.fused = {fused::attention_token_major}});
    for (int call : {attention, dq, dk, dv}) CHECK(f.token_major[at(call)]);
    CHECK(taken(f) == layout_steps);
    for (const auto& [held, writer] : layout_steps) {
      CHECK(f.stored_from[at(held)] == writer);
      CHECK(f.stored_in[at(writer)] == held);
      CHECK(f.writer_of(c.p.nodes, held) == writer);
    }
    CHECK(f.producer_moves.empty());
    check_agreement(f);
  }
  SECTION("and the three gradients from the query gradient's call, reading the kept forward result") {
    const step_fusion f = c.plan(
        {.fused = {fused::attention_token_major, fused::attention_saved, fused::attention_backward}},
        {merge});
    CHECK(f.key_grad_of[at(dq)] == dk);
    CHECK(f.value_grad_of[at(dq)] == dv);
    for (int grad : {dq, dk, dv}) CHECK(f.forward_output_of[at(grad)] == attention);
    CHECK(f.output_kept[at(attention)]);
    std::map<int, int> want = layout_steps;
    want[dk] = want[dv] = want[merge_dk] = want[merge_dv] = dq;  // the merges hold dk's and dv's values
    CHECK(taken(f) == want);
    CHECK(written_by(f, dq) == std::vector<written>{{dk, dk}, {dv, dv}});
    CHECK(moved(f) == std::map<int, std::size_t>{{dk, c.step_of(dq)}, {dv, c.step_of(dq)}});
    check_agreement(f);
  }
  SECTION("the forward result is not reused where the merge is not kept per layer") {
    const step_fusion f = c.plan({.fused = {fused::attention_token_major, fused::attention_saved}});
    CHECK(f.forward_output_of[at(dq)] == -1);
    CHECK(!f.output_kept[at(attention)]);
  }
  SECTION("with the products batched, a split names the batch's first product") {
    const step_fusion f = c.plan({.fused = {fused::attention_token_major, fused::batched_products}});
    CHECK(f.batched_with[at(q)] == std::vector<int>{k, v});
    CHECK(f.taken_over_by[at(split_k)] == q);
    CHECK(f.taken_over_by[at(split_v)] == q);
    CHECK(f.taken_over_by[at(split_q)] == q);
    check_agreement(f);
  }
}

TEST_CASE("plan_step_fusion: the loss's call writes the logits' gradient while the seed is 1", "[plan]") {
  const fusion_case c(classifier_program);
  const int loss = c.named("cross_entropy", sg::op::cross_entropy);
  const int gradient = c.reader(c.p.nodes[loss].inputs[0], sg::op::cross_entropy_grad);
  SECTION("the statistics kept: the gradient reads them, its step runs") {
    const step_fusion f = c.plan({.fused = {fused::cross_entropy_saved}});
    CHECK(f.forward_output_of[at(gradient)] == loss);
    CHECK(f.output_kept[at(loss)]);
    CHECK(taken(f).empty());
  }
  SECTION("the gradient with the loss supersedes them") {
    const step_fusion f =
        c.plan({.fused = {fused::cross_entropy_saved, fused::loss_with_gradient}});
    CHECK(f.logits_grad_of[at(loss)] == gradient);
    CHECK(f.forward_output_of[at(gradient)] == -1);
    CHECK(!f.output_kept[at(loss)]);
    CHECK(taken(f) == std::map<int, int>{{gradient, loss}});
    CHECK(moved(f) == std::map<int, std::size_t>{{gradient, c.step_of(loss)}});
    CHECK(!f.runs(gradient, true));
    CHECK(written_by(f, loss, true) == std::vector<written>{{gradient, gradient}});
    // under a loss scale the two run apart
    CHECK(f.runs(gradient, false));
    CHECK(written_by(f, loss, false).empty());
    check_agreement(f);
  }
  SECTION("pipelines leave them apart") {
    const step_fusion f = c.plan({.fused = {fused::loss_with_gradient}}, {}, true);
    CHECK(taken(f).empty());
  }
}

TEST_CASE("plan_step_fusion: with every fused call, taken_over_by and written_by_call agree", "[plan]") {
  for (const sg::program* p : all_programs) {
    const fusion_case c(*p);
    const step_fusion f = c.plan(every_fused_call());
    CHECK(!taken(f).empty());
    check_agreement(f);
    // a value moves only to the step of the call that writes it
    for (const step_fusion::producer_move& m : f.producer_moves) {
      CAPTURE(m.node);
      REQUIRE(f.taken_over_by[at(m.node)] >= 0);
      CHECK(m.step == c.step_of(f.taken_over_by[at(m.node)]));
    }
  }
}

TEST_CASE("plan_step_fusion: inputs of another program are refused", "[plan]") {
  const fusion_case c(classifier_program);
  const sg::plan::step_fusion_inputs in{.program = c.p,
                                        .steps = c.steps,
                                        .layout = c.layout,
                                        .recomputed = {},
                                        .kept_per_layer = {},
                                        .pipelined = false};
  CHECK_THROWS_WITH(
      sg::plan::plan_step_fusion(in, every_fused_call()),
      sg::testing::ContainsSubstring("shardgraph: bind: plan_step_fusion: the step index and the "
                                     "per-node inputs do not have the program's"));
}
