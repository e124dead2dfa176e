// propagate_sharding: Megatron's placements derived from the annotations.
#include "catch.hpp"
#include "test_models.hpp"

namespace sg = shardgraph;
using namespace test_models;

TEST_CASE("propagate_sharding derives Megatron's placements", "[passes]") {
  STATIC_REQUIRE(propagated.ok());
  constexpr const sg::node& h = named(propagated, "mlp.c_fc", sg::op::linear);
  STATIC_REQUIRE(h.spec[tp] == sg::shard<2>);  // column parallel: hidden sharded
  STATIC_REQUIRE(h.spec[dp] == sg::shard<0>);  // batch stays sharded on dp
  constexpr const sg::node& y = named(propagated, "mlp.c_proj", sg::op::linear);
  STATIC_REQUIRE(y.spec[tp] == sg::partial);   // row parallel: partial sums
  constexpr const sg::node& out = named(propagated, "y", sg::op::output);
  STATIC_REQUIRE(out.required[0][tp] == sg::replicate);
  STATIC_REQUIRE(out.required[0][dp] == sg::replicate);
}

TEST_CASE("propagate_sharding: redistribute keeps the placement of every axis it does not name", "[passes]") {
  static constexpr sg::graph g = sg::passes::propagate_sharding(redistribute_on_tp_only());
  STATIC_REQUIRE(g.ok());
  constexpr const sg::node& y = named(g, "hidden_sharded", sg::op::redistribute);
  STATIC_REQUIRE(y.spec[tp] == sg::shard<2>);  // named: sequence-sharded to hidden-sharded
  STATIC_REQUIRE(y.spec[dp] == sg::shard<0>);  // not named: the batch stays sharded
  STATIC_REQUIRE(y.required[0][dp] == sg::shard<0>);
}
