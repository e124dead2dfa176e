#pragma once
// The cuda backend: host-side pieces over the CUDA runtime API (error checks, devices, device memory)
// and the cuBLASLt GEMM with fused bias / GELU epilogues.
// Link CUDA::cudart and CUDA::cublasLt (the CMake target shardgraph::cuda does).
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/device.hpp>
#include <shardgraph/cuda/device_buffer.hpp>
#include <shardgraph/cuda/device_guard.hpp>
#include <shardgraph/cuda/gemm.hpp>
#include <shardgraph/cuda/text.hpp>
