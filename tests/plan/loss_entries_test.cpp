// plan::plan_loss_entries: which count of counted targets each loss and its gradient divide by, on
// the untied program of test_programs.hpp (one cross_entropy of input `targets`, ignore index -100).
#include <shardgraph/plan/loss_entries.hpp>

#include <vector>

#include "catch.hpp"
#include "test_programs.hpp"

namespace {

namespace sg = shardgraph;
using namespace plan_test_programs;

int only_node_of(const sg::graph& g, sg::op kind) {
  int found = -1;
  for (int i = 0; i < g.size(); ++i)
    if (g[i].kind == kind) {
      REQUIRE(found < 0);
      found = i;
    }
  REQUIRE(found >= 0);
  return found;
}

}  // namespace

TEST_CASE("plan_loss_entries: a loss and its gradient divide by their targets input's count", "[plan]") {
  const sg::graph& g = untied.nodes;
  const int x = node_named(g, "x", sg::op::input), targets = node_named(g, "targets", sg::op::input);
  const int loss = only_node_of(g, sg::op::cross_entropy),
            loss_grad = only_node_of(g, sg::op::cross_entropy_grad);
  const sg::token_input ids{.input = x, .reader = -1, .classes = 32, .targets = false};
  const sg::token_input counted{
      .input = targets, .reader = loss, .classes = 32, .targets = true, .ignore_index = -100};

  // An input of ids takes no entry: the targets' count is the first.
  std::vector<int> entry = sg::plan::plan_loss_entries(g, {ids, counted});
  for (int i = 0; i < g.size(); ++i)
    CHECK(entry[static_cast<std::size_t>(i)] == (i == loss || i == loss_grad ? 0 : -1));

  // Another targets entry before it (another ignore index: not this loss's): the second count.
  sg::token_input other = counted;
  other.ignore_index = -1;
  entry = sg::plan::plan_loss_entries(g, {other, counted});
  CHECK(entry[static_cast<std::size_t>(loss)] == 1);
  CHECK(entry[static_cast<std::size_t>(loss_grad)] == 1);

  // No entry of its input and ignore index: the loss counts all its rows (-1).
  entry = sg::plan::plan_loss_entries(g, {ids, other});
  CHECK(entry[static_cast<std::size_t>(loss)] == -1);
  CHECK(entry[static_cast<std::size_t>(loss_grad)] == -1);
}
