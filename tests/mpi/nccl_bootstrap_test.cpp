// nccl::world_over(MPI's world): the NCCL id travels by MPI broadcast; every process takes the GPU
// of its local rank. A GPU test under mpirun (one process per GPU): skipped without a GPU.
#include <cstdint>
#include <vector>

#include <shardgraph/cuda.hpp>
#include <shardgraph/nccl.hpp>
#include <shardgraph/nccl/host_bootstrap.hpp>

#include "catch.hpp"
#include "test_process.hpp"

namespace sg = shardgraph;

TEST_CASE("nccl over MPI: the world of the MPI processes all-reduces on their GPUs", "[mpi][nccl][gpu]") {
  sg::mpi::communicator host = mpi_test::process.world().world_communicator();
  sg::nccl::world gpus = sg::nccl::world_over(host);
  CHECK(gpus.size() == host.size());
  std::vector<std::int64_t> result(2);
  int nccl_rank = -1;
  gpus.run([&](sg::nccl::communicator& comm) {  // one rank in this process: Catch stays on one thread
    nccl_rank = comm.rank();
    std::vector<std::int64_t> mine{comm.rank() + 1, 10};
    sg::cuda::device_buffer x(mine.size() * sizeof(std::int64_t));
    x.upload(mine.data());
    comm.all_reduce(x.view<std::int64_t>());
    x.download(result.data());
  });
  CHECK(nccl_rank == host.rank());
  const std::int64_t n = host.size();
  CHECK(result == std::vector<std::int64_t>{n * (n + 1) / 2, 10 * n});
}
