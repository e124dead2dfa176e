#pragma once
// shardgraph::mpi::world: this process's place in the MPI job, and the entry point of a rank.
//
//   shardgraph::mpi::world world(argc, argv);        // one per process, before any communication
//   world.run([&](auto& comm) { ... });             // comm: this rank's shardgraph::mpi::communicator
//
// RAII: the constructor initializes MPI (MPI_Init_thread, MPI_THREAD_FUNNELED: MPI is called from the
// main thread only) unless something else already did, and the destructor finalizes only what the
// constructor initialized, so a world can live inside a program that manages MPI itself.
//
// Deadline: every call of its communicators (and of those split from them) that waits longer than
// `timeout` (default 5 minutes) for the other ranks throws an error naming the rank, the collective
// and the MPI call (deadline.hpp), so a rank that stopped makes the others fail instead of hang.
//
// Fail fast: if the rank's function throws, run prints "shardgraph: rank R failed: <what>" to stderr
// and calls MPI_Abort, which ends every process of the job. The other ranks would otherwise wait
// forever in their next collective with this rank.
#include <chrono>
#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string_view>

#include "shardgraph/core/error.hpp"
#include "shardgraph/mpi/communicator.hpp"
#include "shardgraph/mpi/mpi_call.hpp"
#include "shardgraph/mpi/mpi_header.hpp"

namespace shardgraph::mpi {

class world {
 public:
  explicit world(std::chrono::milliseconds timeout = default_timeout) : world(nullptr, nullptr, timeout) {}
  // MPI may read and remove its own arguments from argc/argv.
  world(int& argc, char**& argv, std::chrono::milliseconds timeout = default_timeout)
      : world(&argc, &argv, timeout) {}

  world(const world&) = delete;
  world& operator=(const world&) = delete;

  ~world() {
    communicator_.reset();
    if (!initialized_here_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized == 0) MPI_Finalize();
  }

  int size() const { return communicator_->size(); }
  int rank() const { return communicator_->rank(); }

  // A communicator over every process of the job (a duplicate of MPI_COMM_WORLD, made once by the
  // constructor; the copies returned here share it).
  communicator world_communicator() const { return *communicator_; }

  // Runs fn(communicator&) as this process's rank.
  template <class Fn>
  void run(Fn&& fn) const {
    static_assert(
        std::invocable<Fn&, communicator&>,
        "shardgraph: mpi::world::run: fn cannot be called with a shardgraph::mpi::communicator&. Pass "
        "a callable that takes the communicator, such as [&](auto& comm) { ... }.");
    communicator comm = world_communicator();
    try {
      std::invoke(fn, comm);
    } catch (const std::exception& e) {
      abort_job(rank(), e.what());
    } catch (...) {
      abort_job(rank(), "an exception that is not a std::exception");
    }
  }

 private:
  world(int* argc, char*** argv, std::chrono::milliseconds timeout) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized != 0) {
      fail("mpi::world", "MPI has already been finalized, and MPI cannot start twice in one process",
           "create the world once, before anything calls MPI_Finalize, and keep it alive while ranks "
           "communicate");
    }
    if (initialized == 0) {
      int provided = 0;
      check_mpi_call(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread",
                     "mpi::world");
      initialized_here_ = true;
    }
    try {
      communicator_ = std::make_unique<communicator>(communicator::duplicate(MPI_COMM_WORLD, timeout));
    } catch (...) {
      if (initialized_here_) MPI_Finalize();
      throw;
    }
  }

  [[noreturn]] static void abort_job(int rank, std::string_view what) {
    std::fprintf(stderr, "shardgraph: rank %d failed: %.*s\n", rank, static_cast<int>(what.size()),
                 what.data());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] true if an MPI ever did.
  }

  bool initialized_here_ = false;
  std::unique_ptr<communicator> communicator_;  // set by the constructor, reset before MPI_Finalize
};

}  // namespace shardgraph::mpi
