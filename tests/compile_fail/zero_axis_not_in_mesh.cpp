// ZeRO asked to shard over an axis the mesh does not have.
// expect: ZeRO shards over axis .?'data.?', which the mesh does not have\. set training::zero_axis
#include "tiny_loss_model.hpp"
constexpr auto program = sg::compile<build_model, sg::training{.zero_stage = 1, .zero_axis = "data"}>();
int main() {}
