#pragma once
// world_from_environment: this process's rank of an NCCL world started by a launcher
// (tools/shardgraph-run, torchrun, mpirun, srun; see launch/placement.hpp).
//
//   // shardgraph-run --nproc-per-node 8 -- ./train      (or torchrun, mpirun -np 8, srun -n 8)
//   shardgraph::nccl::world w = shardgraph::nccl::world_from_environment();
//   w.run([](shardgraph::nccl::communicator& comm) { ... });   // one rank, on GPU LOCAL_RANK
//
// The process takes GPU local_rank (of the first SHARDGRAPH_GPUS visible ones, when set); rank 0
// makes the NCCL unique id and hands it to the others over TCP at MASTER_ADDR:MASTER_PORT
// (launch/tcp_exchange.hpp). A world of one process needs no exchange. Errors name the rank.
// Under tools/shardgraph-run it also starts the launcher watchdog (launch/launcher_watchdog.hpp):
// the rank ends when shardgraph-run has ended.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/device.hpp>
#include <shardgraph/launch/device_limits.hpp>
#include <shardgraph/launch/launcher_watchdog.hpp>
#include <shardgraph/launch/placement.hpp>
#include <shardgraph/launch/tcp_exchange.hpp>
#include <shardgraph/nccl/world.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace shardgraph::nccl {

namespace detail {

// Makes GPU `local_rank` current, after checking that the node has that many to use.
inline void select_local_gpu(const std::string& where, int local_rank, const launch::device_limits& limits) {
  const int visible = cuda::device_count();
  if (limits.gpus > visible)
    fail(where,
         "SHARDGRAPH_GPUS is " + std::to_string(limits.gpus) + " but " + std::to_string(visible) +
             " GPUs are visible",
         "ask for at most " + std::to_string(visible) + " GPUs, or check CUDA_VISIBLE_DEVICES");
  const int usable = limits.gpus > 0 ? limits.gpus : visible;
  if (local_rank >= usable)
    fail(where,
         "local rank " + std::to_string(local_rank) + " needs a GPU of its own, and this node has " +
             std::to_string(usable) + " to use",
         "start at most " + std::to_string(usable) +
             " ranks per node (--nproc-per-node), or raise SHARDGRAPH_GPUS");
  if (const cudaError_t e = cudaSetDevice(local_rank); e != cudaSuccess)
    fail(where, "cudaSetDevice(" + std::to_string(local_rank) + ") failed: " + cudaGetErrorString(e),
         "check the GPU with nvidia-smi");
}

}  // namespace detail

inline world world_from_environment(std::chrono::milliseconds timeout = world::default_timeout,
                                    const launch::environment& env = launch::process_environment) {
  launch::watch_launcher(env);
  const launch::placement p = launch::detect_placement(env);
  const launch::device_limits limits = launch::device_limits_from(env);
  const std::string where = "nccl::world_from_environment (rank " + std::to_string(p.rank) + " of " +
                            std::to_string(p.world_size) + ", " + std::string(p.launcher_name()) + ")";
  detail::select_local_gpu(where, p.local_rank, limits);
  ncclUniqueId id{};
  if (p.rank == 0) id = world::new_unique_id();
  const std::span<const std::byte> mine(reinterpret_cast<const std::byte*>(&id), sizeof id);
  const std::vector<std::byte> shared = launch::share_from_rank0(p, mine, timeout);
  if (shared.size() != sizeof id)
    fail(where,
         "rank 0 sent " + std::to_string(shared.size()) + " bytes, not an NCCL unique id (" +
             std::to_string(sizeof id) + ")",
         "run every rank from the same build of shardgraph and NCCL");
  std::memcpy(&id, shared.data(), sizeof id);
  return world::from_unique_id(id, p.rank, p.world_size, timeout);
}

}  // namespace shardgraph::nccl
