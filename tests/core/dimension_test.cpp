// Dimensions: built-in, named by the user, fixed at compile time; and their sizes at bind.
#include <string>

#include <shardgraph/core/error.hpp>
#include <shardgraph/core/model_sizes.hpp>

#include "catch.hpp"

namespace sg = shardgraph;
namespace dim = shardgraph::dim;

TEST_CASE("a named dimension is one dimension per name", "[core]") {
  STATIC_REQUIRE(dim::named<"experts"> == dim::named<"experts">);
  STATIC_REQUIRE(dim::named<"experts"> != dim::named<"expert">);
  STATIC_REQUIRE(dim::named<"experts"> != dim::model);
  STATIC_REQUIRE(dim::fixed<16> == dim::fixed<16>);
  STATIC_REQUIRE(dim::fixed<16> != dim::fixed<8>);
  STATIC_REQUIRE(dim::named<"experts"> * dim::fixed<16> != dim::fixed<16> * dim::named<"experts">);
  STATIC_REQUIRE(sg::dimension_name(dim::named<"image_channels">.first) == "image_channels");
  STATIC_REQUIRE(sg::dimension_name(dim::fixed<1024>.first) == "1024");
  STATIC_REQUIRE(sg::dimension_name(dim::heads.first) == "heads");
  CHECK(sg::extent_text(dim::named<"experts"> * dim::head_dim) == "experts*head_dim");
  CHECK(sg::extent_text(dim::fixed<3> * dim::named<"patches">) == "3*patches");
}

TEST_CASE("sizes: a named dimension is sized by name, a fixed one needs none", "[core]") {
  sg::model_sizes s;
  s.set("experts", 8).set("patches", 196).set("model", 64);
  CHECK(s.get(dim::named<"experts">) == 8);
  CHECK(s.get(dim::named<"patches">) == 196);
  CHECK(s.get(dim::model) == 64);  // a built-in's name sets the built-in
  CHECK(s.get(sg::size_symbol::model) == 64);
  CHECK(s.get(dim::fixed<16>) == 16);
  CHECK(s.get(dim::named<"experts"> * dim::fixed<16>) == 128);
  CHECK(s.get(dim::model * dim::named<"patches">) == 64 * 196);
  s.set("experts", 4);  // set again: the last value counts
  CHECK(s.get(dim::named<"experts">) == 4);
}

namespace {
std::string error_of(const sg::model_sizes& s, sg::extent e) {
  return sg::testing::error_of([&] { (void)s.get(e); });
}
}  // namespace

TEST_CASE("sizes: a named dimension without a size is an error naming it and how to set it", "[core]") {
  sg::model_sizes s;
  s.set("patches", 196);
  CHECK(error_of(s, dim::named<"experts">) ==
        "shardgraph: bind: dimension 'experts' (dim::named<\"experts\">) has no size. give it one before bind: "
        "sizes.set(\"experts\", n)");
  CHECK(error_of(s, dim::named<"patches"> * dim::named<"experts">).find("dimension 'experts'") != std::string::npos);
  s.set("experts", 0);
  CHECK(error_of(s, dim::named<"experts">) ==
        "shardgraph: bind: dimension 'experts' has size 0. give it a positive size: sizes.set(\"experts\", n)");
  CHECK(error_of(s, dim::model).find("size 'model' is 0") != std::string::npos);
}

TEST_CASE("sizes: a product too large for 64 bits names both dimensions", "[core]") {
  sg::model_sizes s;
  s.set("experts", std::int64_t{1} << 40).set("patches", std::int64_t{1} << 40);
  CHECK(error_of(s, dim::named<"experts"> * dim::named<"patches">).find("size 'experts*patches'") != std::string::npos);
}

// dim::named and dim::fixed check their argument in a constant evaluation, where a failure stops
// compilation (tests/compile_fail/named_dimension_with_builtin_name.cpp); the same checks at run
// time throw the message.
TEST_CASE("a named dimension's name and a fixed one's size are checked", "[core]") {
  using sg::testing::contains;
  using sg::testing::error_of;
  CHECK(contains(error_of([] { sg::detail::user_dimension("model"); }), "dim::named: the name is a built-in dimension's"));
  CHECK(contains(error_of([] { sg::detail::user_dimension(""); }), "dim::named: a dimension's name is empty"));
  CHECK(contains(error_of([] { sg::detail::user_dimension("a-b"); }), "holds a character other than a letter, digit or '_'"));
  CHECK(contains(error_of([] { sg::detail::user_dimension("3d"); }), "starts with a digit"));
  CHECK(contains(error_of([] { sg::detail::user_dimension(std::string(56, 'x')); }), "longer than 55 characters"));
  CHECK(sg::detail::user_dimension("image_channels2").name.view() == "image_channels2");
  CHECK(contains(error_of([] { sg::detail::fixed_dimension_of(0); }), "dim::fixed: a fixed dimension's size is not positive"));
  CHECK(sg::detail::fixed_dimension_of(9223372036854775807).name.view() == "9223372036854775807");
}
