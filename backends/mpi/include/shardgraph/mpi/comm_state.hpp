#pragma once
// What the copies of one mpi::communicator share: the MPI_Comm they own, the messages they have sent
// that MPI may still be reading, the working memory of the reductions, and the deadline of its calls.
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "shardgraph/mpi/deadline.hpp"
#include "shardgraph/mpi/mpi_call.hpp"
#include "shardgraph/mpi/mpi_header.hpp"

namespace shardgraph::mpi::detail {

class comm_state {
 public:
  comm_state(MPI_Comm comm, std::chrono::milliseconds timeout) : comm_(comm), timeout_(timeout) {}
  comm_state(const comm_state&) = delete;
  comm_state& operator=(const comm_state&) = delete;

  // Sends still in flight are handed to MPI (MPI_Request_free) and their copies deliberately kept:
  // the matching recv may come later, and MPI completes the transfer then, at the latest in
  // MPI_Finalize. Waiting here instead would hang a program whose message is never received.
  // After MPI_Finalize nothing may be freed: it went with MPI.
  ~comm_state() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized != 0) return;
    for (outgoing& message : outgoing_) {
      int done = 0;
      if (MPI_Test(&message.request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done != 0) continue;
      if (message.request != MPI_REQUEST_NULL) MPI_Request_free(&message.request);
      (void)message.payload.release();
    }
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  MPI_Comm get() const { return comm_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The deadline of the next collective call, which it numbers.
  call_deadline begin_call() { return {timeout_, ++calls_}; }

  // Sends a copy of `bytes` without waiting for the matching recv, as the threads backend does: a
  // ring in which every rank sends before it receives works the same on both. Completed sends are
  // collected here, so a copy lives until the next send after MPI is done with it.
  void send_copy(std::span<const std::byte> bytes, int count, MPI_Datatype type, int peer, int tag,
                 std::string_view where) {
    collect_completed_sends(where);
    outgoing message{MPI_REQUEST_NULL, std::make_unique_for_overwrite<std::byte[]>(bytes.size())};
    if (!bytes.empty()) std::memcpy(message.payload.get(), bytes.data(), bytes.size());
    check_mpi_call(MPI_Isend(message.payload.get(), count, type, peer, tag, comm_, &message.request),
                   "MPI_Isend", where);
    outgoing_.push_back(std::move(message));
  }

  // `count` elements of uninitialized memory, valid until the next call. Kept between calls because
  // a training step reduces buckets of the same sizes again and again, and fresh memory would be
  // page-faulted in every time; it grows to the largest request.
  template <class T>
  std::span<T> scratch(std::size_t count) {
    const std::size_t bytes = count * sizeof(T);
    if (bytes > scratch_bytes_) {
      scratch_.reset();
      scratch_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
      scratch_bytes_ = bytes;
    }
    return {reinterpret_cast<T*>(scratch_.get()), count};
  }

 private:
  struct outgoing {
    MPI_Request request;
    std::unique_ptr<std::byte[]> payload;  // MPI reads it until the request completes
  };

  // Tests every send first and only then drops the completed ones, so that a failing test leaves the
  // list as it was.
  void collect_completed_sends(std::string_view where) {
    std::vector<char> done(outgoing_.size());
    for (std::size_t i = 0; i < outgoing_.size(); ++i) {
      int completed = 0;
      check_mpi_call(MPI_Test(&outgoing_[i].request, &completed, MPI_STATUS_IGNORE),
                     "MPI_Test (of an earlier send)", where);
      done[i] = static_cast<char>(completed != 0);
    }
    std::size_t kept = 0;
    for (std::size_t i = 0; i < outgoing_.size(); ++i) {
      if (done[i] != 0) continue;
      if (kept != i) outgoing_[kept] = std::move(outgoing_[i]);
      ++kept;
    }
    outgoing_.resize(kept);
  }

  MPI_Comm comm_;
  std::chrono::milliseconds timeout_;
  long long calls_ = 0;
  std::vector<outgoing> outgoing_;
  std::unique_ptr<std::byte[]> scratch_;
  std::size_t scratch_bytes_ = 0;
};

}  // namespace shardgraph::mpi::detail
