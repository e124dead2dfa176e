// A model deeper than the default graph capacity (320 nodes): a stack of unrolled layers compiles,
// at compile time and at run time, once the program raises SHARDGRAPH_MAX_NODES. This executable
// links no other unit that includes the library, so the capacity is alike in all of its program,
// as ir/graph.hpp requires.
#define SHARDGRAPH_MAX_NODES 512

#include <string_view>

#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>

#include "catch.hpp"

namespace sg = shardgraph;

namespace {

constexpr int layers = 90;  // 4 nodes each: 362 nodes with the input and the output

// "w00" ... "w89"
constexpr sg::name_buffer weight_name(int layer) {
  sg::name_buffer name("w");
  const char digits[2] = {static_cast<char>('0' + layer / 10), static_cast<char>('0' + layer % 10)};
  name.append(std::string_view(digits, 2));
  return name;
}

// x (batch, model) sharded on dp; each layer h + gelu(h @ w), unrolled (no repeat block).
constexpr sg::graph deep_stack() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">> g;
  auto h = g.input("x", {batch, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  for (int i = 0; i < layers; ++i)
    h = h + sg::gelu(sg::linear(h, g.param(weight_name(i).view(), {model, model})));
  sg::output(h, "y");
  return g.finish();
}

}  // namespace

TEST_CASE("a program that raises the graph capacity compiles a deep unrolled stack", "[ir]") {
  constexpr sg::program program = sg::compile<deep_stack>();
  STATIC_REQUIRE(program.ok());
  STATIC_REQUIRE(program.nodes.size() > 320);
  STATIC_REQUIRE(program.count(sg::op::linear) == layers);
  STATIC_REQUIRE(program.count(sg::op::gelu) == layers);

  const sg::program at_run_time = sg::compile_graph(deep_stack());
  REQUIRE(at_run_time.ok());
  CHECK(at_run_time.nodes.size() == program.nodes.size());
  CHECK(at_run_time.steps.size() == program.steps.size());
}

TEST_CASE("a graph past its capacity keeps an error naming the capacity and how to raise it", "[ir]") {
  sg::graph g;
  sg::node n;
  n.name.assign("x");
  for (std::size_t i = 0; i < sg::max_nodes; ++i) REQUIRE(g.add(n) == static_cast<int>(i));
  REQUIRE(g.ok());
  CHECK(g.add(n) == static_cast<int>(sg::max_nodes) - 1);
  CHECK(g.size() == static_cast<int>(sg::max_nodes));
  CHECK(g.error.view().starts_with(
      "shardgraph: graph: more than 512 nodes (at 'x'). define SHARDGRAPH_MAX_NODES"));
}
