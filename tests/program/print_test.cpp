// The printed program: text and Graphviz.
#include <sstream>

#include <shardgraph/program/print_graphviz.hpp>
#include <shardgraph/program/print_text.hpp>

#include "catch.hpp"
#include "../passes/test_models.hpp"

namespace sg = shardgraph;
using namespace test_models;

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
