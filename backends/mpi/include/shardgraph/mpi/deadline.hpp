#pragma once
// The deadline of the MPI communicator's calls, as the threads and NCCL communicators have one: each
// collective is started as a non-blocking MPI call (MPI_Iallreduce, MPI_Ialltoallv, ...) and
// completed by polling MPI_Test until it is done or the communicator's timeout has passed. A rank
// that never joins (stopped with SIGSTOP, hung, or making other calls) thus makes the others throw
//   shardgraph: mpi::communicator::all_reduce on rank 0 of 2: MPI_Ialltoallv did not complete within
//   2000 ms (collective call 7 on this communicator): a rank has not joined it. ...
// instead of waiting forever. The abandoned call stays pending inside MPI: after a timeout the
// communicator cannot be used again, and the process should end (mpi::world::run calls MPI_Abort
// on the rank's error, which ends every process of the job).
//
// Polling: MPI_Test in a tight loop for the first 200 microseconds (a collective between ranks that
// are all present usually finishes within that), then with pauses that grow to 1 ms, which bounds
// the latency a late call adds and keeps a waiting rank from spinning a core.
#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>

#include "shardgraph/core/error.hpp"
#include "shardgraph/mpi/mpi_call.hpp"
#include "shardgraph/mpi/mpi_header.hpp"

namespace shardgraph::mpi {

inline constexpr std::chrono::milliseconds default_timeout = std::chrono::minutes(5);

// What a wait needs to know to fail clearly: the limit and which call of the communicator it is.
struct call_deadline {
  std::chrono::milliseconds timeout;
  long long call_number;  // collective calls on this communicator so far, this one included
};

// Waits for `request` (started by `call`, e.g. "MPI_Iallgather") within the deadline.
inline void wait_within(MPI_Request& request, const call_deadline& deadline, std::string_view call,
                        std::string_view where) {
  using clock = std::chrono::steady_clock;
  const clock::time_point start = clock::now(), end = start + deadline.timeout;
  auto pause = std::chrono::microseconds(10);
  while (true) {
    int done = 0;
    check_mpi_call(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test of " + std::string(call), where);
    if (done != 0) return;
    const clock::time_point now = clock::now();
    if (now > end)
      fail(where,
           std::string(call) + " did not complete within " + std::to_string(deadline.timeout.count()) +
               " ms (collective call " + std::to_string(deadline.call_number) +
               " on this communicator): a rank has not joined it (stopped, hung, or making other calls)",
           "Check that every rank makes the same calls in the same order and is still running, or give "
           "mpi::world a longer timeout; this communicator cannot be used after this error");
    if (now - start > std::chrono::microseconds(200)) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
}

}  // namespace shardgraph::mpi
