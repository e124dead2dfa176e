#pragma once
// The cuda backend: host-side pieces over the CUDA runtime API (error checks, devices, device memory).
// Link CUDA::cudart (the CMake target shardgraph::cuda does).
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/device.hpp>
#include <shardgraph/cuda/device_buffer.hpp>
#include <shardgraph/cuda/device_guard.hpp>
#include <shardgraph/cuda/text.hpp>
