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
// Polling: MPI_Test without pause for the first 100 ms, as MPI's own blocking calls spin (each
// test also drives the progress of MPI's non-blocking algorithms, round after round), yielding the
// core to a rank that waits for it; then with pauses that grow to 1 ms, so that a rank waiting for
// a stopped peer does not hold a core for the whole timeout.
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

// The pause between two polls: a yield for the first 100 ms (it returns at once unless another
// process waits for the core, as when ranks outnumber cores), then sleeps of 10 us doubling up to 1 ms.
class poll_pace {
 public:
  void after_poll() {
    if (std::chrono::steady_clock::now() - start_ <= std::chrono::milliseconds(100)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, std::chrono::microseconds(1000));
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::microseconds pause_{10};
};

// Waits for `request` (started by `call`, e.g. "MPI_Iallgather") within the deadline.
inline void wait_within(MPI_Request& request, const call_deadline& deadline, std::string_view call,
                        std::string_view where) {
  using clock = std::chrono::steady_clock;
  const clock::time_point end = clock::now() + deadline.timeout;
  for (poll_pace pace;; pace.after_poll()) {
    int done = 0;
    check_mpi_call(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test of " + std::string(call), where);
    if (done != 0) return;
    if (clock::now() > end)
      fail(where,
           std::string(call) + " did not complete within " + std::to_string(deadline.timeout.count()) +
               " ms (collective call " + std::to_string(deadline.call_number) +
               " on this communicator): a rank has not joined it (stopped, hung, or making other calls)",
           "Check that every rank makes the same calls in the same order and is still running, or give "
           "mpi::world a longer timeout; this communicator cannot be used after this error");
  }
}

}  // namespace shardgraph::mpi
