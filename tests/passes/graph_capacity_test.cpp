// The graph's capacity is the program's choice: a model deeper than the default (320 nodes)
// raises its builder's, programs of several capacities live in one executable, and a graph past
// its capacity keeps an error naming it and how to raise it.
#include <cstddef>
#include <string_view>
#include <type_traits>

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
template <std::size_t Capacity>
constexpr sg::basic_graph<Capacity> deep_stack() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">, Capacity> g;
  auto h = g.input("x", {batch, model}, sg::dtype::f32, sg::on<"dp">(sg::shard<0>));
  for (int i = 0; i < layers; ++i)
    h = h + sg::gelu(sg::linear(h, g.param(weight_name(i).view(), {model, model})));
  sg::output(h, "y");
  return g.finish();
}

// x (batch, model) replicated; each of `count` layers adds a column-parallel product, sharded on
// tp and gathered back: every layer needs its own redistribution, more than any fixed table holds.
template <std::size_t Capacity, int count>
constexpr sg::basic_graph<Capacity> column_parallel_stack() {
  using namespace sg::dim;
  sg::builder<sg::mesh<"dp", "tp">, Capacity> g;
  auto h = g.input("x", {batch, model}, sg::dtype::f32);
  for (int i = 0; i < count; ++i) {
    auto y = sg::linear(h, g.param(weight_name(i).view(), {model, model}, sg::on<"tp">(sg::shard<1>)));
    h = h + sg::redistribute(y, sg::on<"tp">(sg::replicate));
  }
  sg::output(h, "y");
  return g.finish();
}

}  // namespace

TEST_CASE("the collectives a graph needs are bounded by its capacity alone", "[ir]") {
  // One more than insert_collectives' table held when it was fixed. At run time: evaluated by the
  // compiler, the program costs it a minute.
  constexpr int count = 97;
  const auto program = sg::compile_graph(column_parallel_stack<512, count>());
  REQUIRE(program.ok());
  CHECK(program.count(sg::op::linear) == count);
  int redistributions = 0;
  for (const sg::node& n : program.nodes.nodes) redistributions += sg::is_collective(n.kind) || n.kind == sg::op::local_slice;
  CHECK(redistributions >= count);
}

TEST_CASE("a builder of a larger capacity compiles a deep unrolled stack", "[ir]") {
  constexpr auto program = sg::compile<deep_stack<512>>();
  STATIC_REQUIRE(std::is_same_v<std::remove_const_t<decltype(program)>, sg::basic_program<512>>);
  STATIC_REQUIRE(program.ok());
  STATIC_REQUIRE(program.nodes.size() > 320);
  STATIC_REQUIRE(program.count(sg::op::linear) == layers);
  STATIC_REQUIRE(program.count(sg::op::gelu) == layers);

  const sg::basic_program<512> at_run_time = sg::compile_graph(deep_stack<512>());
  REQUIRE(at_run_time.ok());
  CHECK(at_run_time.nodes.size() == program.nodes.size());
  CHECK(at_run_time.steps.size() == program.steps.size());
  // The run time reads a program of any capacity through a view.
  const sg::program_view view = at_run_time;
  CHECK(view.nodes.size() == program.nodes.size());
  CHECK(view.count(sg::op::gelu) == layers);
}

TEST_CASE("the same model past the default capacity keeps an error naming how to raise it", "[ir]") {
  const sg::program small = sg::compile_graph(deep_stack<sg::default_graph_capacity>());
  REQUIRE_FALSE(small.ok());
  CHECK(small.error().starts_with("shardgraph: graph: more than 320 nodes (at '"));
  CHECK(small.error().find("raise the graph's capacity, the builder's second template argument "
                           "(builder<Mesh, 640>)") != std::string_view::npos);
}

TEST_CASE("a graph past its capacity keeps the first error and stays in bounds", "[ir]") {
  sg::basic_graph<16> g;
  sg::node n;
  n.name.assign("x");
  for (int i = 0; i < 16; ++i) REQUIRE(g.add(n) == i);
  REQUIRE(g.ok());
  n.name.assign("y");
  CHECK(g.add(n) == 15);
  CHECK(g.size() == 16);
  CHECK(g.error.view() ==
        "shardgraph: graph: more than 16 nodes (at 'y'). raise the graph's capacity, the builder's second "
        "template argument (builder<Mesh, 32>), or build repeated layers once with repeat()");
  n.name.assign("z");
  g.add(n);
  CHECK(g.error.view().find("'y'") != std::string_view::npos);  // only the first error is kept
}
