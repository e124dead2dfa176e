// There is no ZeRO stage 4: asking for it stops compilation with the stages that exist.
// expect: ZeRO stage 4 does not exist \(stages are 0 to 3\)
#include "tiny_loss_model.hpp"
constexpr auto program = sg::compile<build_model, sg::training{.zero_stage = 4}>();
int main() {}
