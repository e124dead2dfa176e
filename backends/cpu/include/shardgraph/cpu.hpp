#pragma once
// The cpu backend: shardgraph::cpu::backend (Eigen GEMMs, fused loops, f64 and f32) and its kernels.
#include "shardgraph/cpu/backend.hpp"
#include "shardgraph/cpu/kernels.hpp"
