// verify: structural checks and global shapes (STATIC_REQUIRE on the pass output).
#include "catch.hpp"
#include "test_models.hpp"

namespace sg = shardgraph;
using namespace test_models;

TEST_CASE("verify accepts the Megatron MLP and infers global shapes", "[passes]") {
  STATIC_REQUIRE(verified.ok());
  constexpr const sg::node& h = named(verified, "mlp.c_fc", sg::op::linear);
  STATIC_REQUIRE(h.shape == sg::shape{sg::dim::batch, sg::dim::seq, sg::dim::ffn});
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

TEST_CASE("a shape error names the op, the node and both shapes, and later ops add nothing", "[passes]") {
  sg::graph g = [] {
    using namespace sg::dim;
    sg::builder<Mesh> b;
    auto x = b.input("x", {batch, seq, model}, sg::dtype::f32);
    auto h = b.input("h", {batch, seq, ffn}, sg::dtype::f32);
    auto y = sg::layer_norm(x + h, b.param("ln_f.weight", {model}), b.param("ln_f.bias", {model}));
    sg::output(sg::linear(y, b.param("lm_head.weight", {model, vocab})), "logits");
    return b.finish();
  }();
  const sg::program p = sg::compile_graph(g);
  REQUIRE_FALSE(p.ok());
  CHECK(p.error() ==
        "shardgraph: add 'add': operands have different shapes: a (batch, seq, model), b (batch, seq, ffn). "
        "elementwise ops need equal shapes");
}

TEST_CASE("shapes in messages are spelled as bind spells them", "[passes]") {
  constexpr sg::diagnostic d = [] {
    using namespace sg::dim;
    sg::diagnostic m;
    m << sg::shape{batch, seq, heads * head_dim} << " " << sg::shape{};
    return m;
  }();
  STATIC_REQUIRE(d.view() == "(batch, seq, heads*head_dim) ()");
}
