// The MPI communicator's deadline (issue 31), under mpirun with 2 processes: rank 1 never joins (it
// sleeps), and rank 0's calls, each on its own communicator with a 1 s timeout, must each end in an
// error naming rank 0, the collective and the MPI call instead of waiting forever.
// Rank 0 prints a line per call and a verdict, then ends the job with MPI_Abort: a communicator whose
// call timed out cannot be used again, and rank 1 is still asleep. The CTest test passes on the
// verdict line (tests/CMakeLists.txt), whatever status mpirun gives an aborted job.
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shardgraph/mpi.hpp"

namespace mpi = shardgraph::mpi;

int main(int argc, char** argv) {
  using std::chrono::milliseconds;
  const mpi::world world(argc, argv, milliseconds(1000));
  if (world.size() != 2) {
    if (world.rank() == 0) std::printf("FAIL: run with 2 processes\n");
    return 1;
  }
  std::vector<float> one(4, 1.0f), two(8, 0.0f);
  const std::vector<std::pair<std::string, std::function<void(mpi::communicator&)>>> calls{
      {"all_reduce", [&](mpi::communicator& c) { shardgraph::comm::all_reduce(c, one); }},
      {"all_gather", [&](mpi::communicator& c) { shardgraph::comm::all_gather(c, one, two); }},
      {"reduce_scatter", [&](mpi::communicator& c) { shardgraph::comm::reduce_scatter(c, two, one); }},
      {"all_to_all", [&](mpi::communicator& c) { shardgraph::comm::all_to_all(c, two, two); }},
      {"broadcast", [&](mpi::communicator& c) { shardgraph::comm::broadcast(c, one, 1); }},
      {"barrier", [&](mpi::communicator& c) { c.barrier(); }},
      {"recv", [&](mpi::communicator& c) { shardgraph::comm::recv(c, one, 1, 5); }},
      {"split", [&](mpi::communicator& c) { c.split(0, 0); }},
  };
  // One communicator per call, made while both ranks are here; the split ones inherit the timeout.
  std::vector<mpi::communicator> comms;
  for (std::size_t i = 0; i < calls.size(); ++i)
    comms.push_back(i % 2 == 0 ? mpi::communicator::duplicate(MPI_COMM_WORLD, milliseconds(1000))
                               : world.world_communicator().split(0, world.rank()));
  world.world_communicator().barrier();
  if (world.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(120));  // never joins; MPI_Abort ends it
    return 0;
  }
  int failures = 0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& [name, call] = calls[i];
    std::string message = "(no error)";
    const auto start = std::chrono::steady_clock::now();
    try {
      call(comms[i]);
    } catch (const std::exception& e) {
      message = e.what();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool names_call = message.find("shardgraph: mpi::communicator::" + name + " on rank 0 of 2: ") == 0;
    const bool says_why =
        message.find("did not complete within 1000 ms") != std::string::npos ||
        message.find("no message from rank 1 with tag 5 arrived within 1000 ms") != std::string::npos;
    const bool ok = names_call && says_why && seconds < 10;
    failures += ok ? 0 : 1;
    std::printf("%s %s after %.1f s: %s\n", ok ? "ok  " : "FAIL", name.c_str(), seconds, message.c_str());
  }
  if (failures == 0) std::printf("deadline test: every call timed out as expected\n");
  std::fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, failures == 0 ? 0 : 1);
  return 1;
}
