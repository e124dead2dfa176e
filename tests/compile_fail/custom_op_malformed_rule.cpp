// A custom op whose sharding rule has no arrow.
// expect: shardgraph: custom op .?'bad_rule.?': sharding rule .?.?"b s d => b s d.?.?": the rule has no .?'->.?'
#include <span>
#include <string_view>

#include <shardgraph/dsl/custom.hpp>
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
namespace sg = shardgraph;
struct bad_rule {
  static constexpr std::string_view name = "bad_rule";
  static constexpr int inputs = 1;
  static constexpr std::string_view sharding = "b s d => b s d";
  static constexpr sg::shape output_shape(std::span<const sg::shape> in) { return in[0]; }
};
constexpr sg::graph build_model() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f32);
  sg::output(sg::apply<bad_rule>({x}), "y");
  return g.finish();
}
constexpr auto program = sg::compile<build_model>();
int main() {}
