#pragma once
// The cpu kernels compiled once per program instead of once per unit.
//
// cpu::backend::run instantiates every kernel (the Eigen products among them), which costs each
// unit that calls it several seconds of compiling. A program of many units may compile them once:
// it defines SHARDGRAPH_CPU_KERNELS_SEPARATE in every unit (before the first include; the CMake
// target shardgraph::cpu_separate does both) and includes this header in exactly one unit, which
// then holds the one definition of cpu::backend::run. Without the macro, run is inline in
// cpu/backend.hpp and this header adds nothing.
#include "shardgraph/cpu/backend.hpp"

#ifdef SHARDGRAPH_CPU_KERNELS_SEPARATE
void shardgraph::cpu::backend::run(const compute::kernel_call<buffer>& call) { dispatch(call); }
#endif
