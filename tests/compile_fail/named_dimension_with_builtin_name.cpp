// A user's dimension may not take a built-in one's name: dim::named<"model"> would be a second,
// different "model".
// expect: shardgraph: dim::named: the name is a built-in dimension.?'s\. use the built-in one
#include <shardgraph/core/extent.hpp>
namespace sg = shardgraph;
constexpr sg::extent hidden = sg::dim::named<"model">;
int main() {}
