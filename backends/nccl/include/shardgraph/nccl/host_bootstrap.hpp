#pragma once
// world_over(host): the NCCL world of the processes that a host communicator already connects
// (MPI's world under mpirun, typically): the NCCL unique id travels by the host's broadcast, the
// ranks and the size are the host's, and each process takes GPU local_rank of its node (from the
// launcher's environment, launch/placement.hpp).
//
//   shardgraph::mpi::world mpi(argc, argv);
//   auto host = mpi.world_communicator();
//   shardgraph::nccl::world gpus = shardgraph::nccl::world_over(host);
//
// Any Communicator whose broadcast carries bytes serves (the MPI one does). The TCP route for
// launchers without MPI is nccl/bootstrap.hpp.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/device.hpp>
#include <shardgraph/launch/device_limits.hpp>
#include <shardgraph/launch/placement.hpp>
#include <shardgraph/nccl/bootstrap.hpp>
#include <shardgraph/nccl/world.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>

namespace shardgraph::nccl {

template <class Host>
world world_over(Host& host, std::chrono::milliseconds timeout = world::default_timeout,
                 const launch::environment& env = launch::process_environment) {
  const launch::placement p = launch::detect_placement(env);
  const launch::device_limits limits = launch::device_limits_from(env);
  const std::string where =
      "nccl::world_over (rank " + std::to_string(host.rank()) + " of " + std::to_string(host.size()) + ")";
  // The local rank is the launcher's; a process started alone is local rank 0 of its node.
  const int local_rank = p.world_size == host.size() ? p.local_rank : 0;
  if (p.from != launch::launcher::none && p.world_size != host.size())
    fail(where,
         "the launcher (" + std::string(p.launcher_name()) + ") started " + std::to_string(p.world_size) +
             " processes, but the host communicator has " + std::to_string(host.size()),
         "pass the communicator of every launched process (MPI's world)");
  detail::select_local_gpu(where, local_rank, limits);
  ncclUniqueId id{};
  if (host.rank() == 0) id = world::new_unique_id();
  std::byte bytes[sizeof id];
  std::memcpy(bytes, &id, sizeof id);
  host.broadcast(std::span<std::byte>(bytes, sizeof id), 0);
  std::memcpy(&id, bytes, sizeof id);
  return world::from_unique_id(id, host.rank(), host.size(), timeout);
}

}  // namespace shardgraph::nccl
