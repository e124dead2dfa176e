// ZeRO stage 3 (sharded parameters) is not implemented: asking for it stops compilation.
// expect: ZeRO stage 3 is not available \(stage 3, sharded parameters, is not implemented yet\)
#include <shardgraph/shardgraph.hpp>
namespace sg = shardgraph;
constexpr sg::graph build_model() { return sg::models::gpt2<sg::mesh<"dp", "tp">>(); }
constexpr auto program = sg::compile<build_model, sg::training{.zero_stage = 3}>();
int main() {}
