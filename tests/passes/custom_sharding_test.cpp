// Custom ops in the passes: the sharding rule's parser, the placements it decides per mesh axis,
// the shape rule's and autodiff's diagnostics, and the printers' names.
#include <span>
#include <sstream>
#include <string>
#include <string_view>

#include <shardgraph/dsl/custom.hpp>
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/passes/custom_sharding.hpp>
#include <shardgraph/program/print_text.hpp>

#include "catch.hpp"

namespace sg = shardgraph;
using sg::passes::detail::decide_custom;

namespace {

constexpr sg::placement R = sg::replicate, P = sg::partial;
constexpr sg::placement S(int d) { return sg::shard_on(d); }

// y (b, s, v) = x (b, s, k) w (k, v), a sum over k; forward only (no backward).
struct contract {
  static constexpr std::string_view name = "contract";
  static constexpr int inputs = 2;
  static constexpr std::string_view sharding = "b s k, k v -> b s v | sum k";
  static constexpr sg::shape_result output_shape(std::span<const sg::shape> in) {
    if (!(in[0][2] == in[1][0])) return sg::shape_error("x's last dimension differs from w's first", "check w's shape");
    return sg::shape{in[0][0], in[0][1], in[1][1]};
  }
};

// y = x; its backward forgets to set the gradient.
struct forgetful {
  static constexpr std::string_view name = "forgetful";
  static constexpr int inputs = 1;
  static constexpr std::string_view sharding = "b s d -> b s d";
  static constexpr sg::shape output_shape(std::span<const sg::shape> in) { return in[0]; }
  static constexpr void backward(sg::custom_gradient&) {}
};

using Mesh = sg::mesh<"dp", "tp">;

// x (batch, seq, model) @ w (model, vocab) by `contract`, then the loss.
constexpr sg::graph contract_model(bool w_sharded) {
  using namespace sg::dim;
  sg::builder<Mesh> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  auto t = g.input("targets", {batch, seq}, sg::dtype::i64, sg::on<"dp">(sg::shard<0>));
  auto w = w_sharded ? g.param("w", {model, vocab}, sg::on<"tp">(sg::shard<0>)) : g.param("w", {model, vocab});
  sg::output(sg::cross_entropy(sg::apply<contract>({x, w}, 0.0, "lm_head"), t), "loss");
  return g.finish();
}

}  // namespace

TEST_CASE("sharding rule: parses inputs, output and summed letters", "[passes][custom]") {
  constexpr sg::sharding_rule r = sg::parse_sharding_rule("b s k, k v -> b s v | sum k");
  STATIC_REQUIRE(r.error == nullptr);
  STATIC_REQUIRE(r.input_count == 2);
  STATIC_REQUIRE(r.inputs[0].rank == 3);
  STATIC_REQUIRE(r.inputs[1].rank == 2);
  STATIC_REQUIRE(r.dim_of(1, 'v') == 1);
  STATIC_REQUIRE(r.dim_of(1, 'b') == -1);
  STATIC_REQUIRE(r.output_dim('v') == 2);
  STATIC_REQUIRE(r.sums_over('k'));
  STATIC_REQUIRE(!r.sums_over('b'));
  constexpr sg::sharding_rule compact = sg::parse_sharding_rule("bsd->bsd");
  STATIC_REQUIRE(compact.error == nullptr);
  STATIC_REQUIRE(compact.output.rank == 3);
}

TEST_CASE("sharding rule: malformed rules say why", "[passes][custom]") {
  auto why = [](std::string_view text) {
    const sg::sharding_rule r = sg::parse_sharding_rule(text);
    return std::string(r.error == nullptr ? "" : r.error);
  };
  CHECK(why("b s d").find("no '->'") != std::string::npos);
  CHECK(why("b s 1 -> b s").find("not a letter") != std::string::npos);
  CHECK(why("b b -> b").find("two dimensions of one tensor") != std::string::npos);
  CHECK(why("b k -> b k | sum k").find("also in the output") != std::string::npos);
  CHECK(why("b k -> b | sum z").find("no input has") != std::string::npos);
  CHECK(why("b k -> b | add k").find("expects 'sum'") != std::string::npos);
  CHECK(why("a, b, c, d, e, f -> a").find("more than 5 inputs") != std::string::npos);
  CHECK(why("a b c d e -> a").find("max_rank") != std::string::npos);
}

TEST_CASE("custom placements: a dimension in the output passes, others are made whole", "[passes][custom]") {
  constexpr sg::sharding_rule r = sg::parse_sharding_rule("b s d, d -> b s d");
  constexpr auto batch = decide_custom(r, {S(0), R});
  STATIC_REQUIRE(batch.out == S(0));
  STATIC_REQUIRE(batch.need[0] == S(0));
  STATIC_REQUIRE(batch.need[1] == R);
  constexpr auto features = decide_custom(r, {R, S(0)});  // the vector's d passes: x is sliced along d
  STATIC_REQUIRE(features.out == S(2));
  STATIC_REQUIRE(features.need[0] == S(2));
  STATIC_REQUIRE(features.need[1] == S(0));
  constexpr auto partial = decide_custom(r, {P, R});  // reduced first
  STATIC_REQUIRE(partial.out == R);
  STATIC_REQUIRE(partial.need[0] == R);
  constexpr sg::sharding_rule gathered = sg::parse_sharding_rule("b d -> b e");
  constexpr auto whole = decide_custom(gathered, {S(1)});
  STATIC_REQUIRE(whole.out == R);
  STATIC_REQUIRE(whole.need[0] == R);
}

TEST_CASE("custom placements: a summed letter gives Partial; two letters conflict", "[passes][custom]") {
  constexpr sg::sharding_rule r = sg::parse_sharding_rule("b s k, k v -> b s v | sum k");
  constexpr auto row_parallel = decide_custom(r, {R, S(0)});
  STATIC_REQUIRE(row_parallel.out == P);
  STATIC_REQUIRE(row_parallel.need[0] == S(2));
  STATIC_REQUIRE(row_parallel.need[1] == S(0));
  constexpr auto column_parallel = decide_custom(r, {R, S(1)});
  STATIC_REQUIRE(column_parallel.out == S(2));
  STATIC_REQUIRE(column_parallel.need[0] == R);
  constexpr auto conflict = decide_custom(r, {S(0), S(1)});
  STATIC_REQUIRE(conflict.conflict != nullptr);
}

TEST_CASE("custom ops: the program holds the rule's collectives and the op's name", "[passes][custom]") {
  constexpr sg::program p = sg::compile_graph(contract_model(true));
  STATIC_REQUIRE(p.ok());
  STATIC_REQUIRE(p.count(sg::op::custom) == 1);
  STATIC_REQUIRE(p.count(sg::op::all_reduce, "tp") == 1);  // the Partial sum over k
  STATIC_REQUIRE(p.count(sg::op::local_slice, "tp") == 1);  // x sliced along k
  std::ostringstream text;
  sg::print_program(text, p);
  CHECK(text.str().find("contract") != std::string::npos);  // the op's name, beside its node's "lm_head"
  CHECK(text.str().find("custom") == std::string::npos);
}

TEST_CASE("custom ops: autodiff of a forward-only op, or of a backward that sets no gradient, names the op",
          "[passes][custom]") {
  const sg::program p = sg::compile_graph(contract_model(false), sg::training{});
  CHECK(std::string(p.error()) ==
        "shardgraph: contract 'lm_head': the loss depends on op 'contract', which has no backward. add static "
        "constexpr void backward(shardgraph::custom_gradient&) to contract, or keep the op out of the loss's path");
  const sg::program q = sg::compile_graph(
      [] {
        using namespace sg::dim;
        sg::builder<Mesh> g;
        auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
        auto t = g.input("targets", {batch, seq}, sg::dtype::i64);
        auto y = sg::apply<forgetful>({sg::linear(x, g.param("w", {model, vocab}))});
        sg::output(sg::cross_entropy(y, t), "loss");
        return g.finish();
      }(),
      sg::training{});
  CHECK(std::string(q.error()) ==
        "shardgraph: forgetful 'forgetful': forgetful::backward sets no gradient for input 0. call "
        "set_input_grad(0, ...) with a tensor of input 0's shape");
}

TEST_CASE("custom ops: a rejected shape names the op, the node and the inputs", "[passes][custom]") {
  const sg::program p = sg::compile_graph([] {
    using namespace sg::dim;
    sg::builder<Mesh> g;
    auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
    sg::output(sg::apply<contract>({x, g.param("w", {ffn, vocab})}, 0.0, "proj"), "y");
    return g.finish();
  }());
  CHECK(std::string(p.error()) ==
        "shardgraph: contract 'proj': x's last dimension differs from w's first: input 0 (batch, seq, model), "
        "input 1 (ffn, vocab). check w's shape");
}
