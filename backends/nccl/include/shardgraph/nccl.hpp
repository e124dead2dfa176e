#pragma once
// The nccl backend: a Communicator over NCCL whose buffers are device memory, one GPU per rank.
// Link NCCL and CUDA::cudart (the CMake target shardgraph::nccl does).
#include <shardgraph/comm/collectives.hpp>
#include <shardgraph/nccl/bootstrap.hpp>
#include <shardgraph/nccl/check.hpp>
#include <shardgraph/nccl/comm_state.hpp>
#include <shardgraph/nccl/communicator.hpp>
#include <shardgraph/nccl/element_type.hpp>
#include <shardgraph/nccl/world.hpp>
#include <shardgraph/nccl/world_state.hpp>
