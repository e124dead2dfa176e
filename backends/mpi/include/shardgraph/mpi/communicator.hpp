#pragma once
// shardgraph::mpi::communicator: the Communicator concept (shardgraph/comm/communicator.hpp) over an
// MPI communicator, one rank per process. Its calls mirror shardgraph::threads::communicator, so the
// same code runs on both and gets the same bits.
//
// Determinism. MPI_Allreduce and MPI_Reduce_scatter promise no order of summation: ranks, runs and
// process counts may differ in the last bits. The contract asks for the sum in rank order
// 0, 1, ..., size-1 on every rank, so the reductions are data movement plus a local sum in rank
// order (rank_order_sum.hpp):
//   all_reduce(n):     MPI_Alltoallv gives each rank its slice (about n/size elements) of every rank's
//                      data; the slice's owner sums it in rank order; MPI_Allgatherv hands the sums
//                      back. Each rank sends and receives about 2n(size-1)/size elements, as in a ring
//                      all-reduce, and needs about n + n/size elements of working memory.
//   reduce_scatter(n): MPI_Alltoall brings chunk r of every rank's `in` to rank r, which sums the
//                      chunks in rank order. About n(size-1)/size elements each way; n elements of
//                      working memory (size chunks of out.size()).
// What is given up is MPI's own tuned reduction (hierarchical or in-network): two steps instead of
// one, and the sum runs on the host.
//
// Argument checks. Each collective checks its arguments on this rank (sizes, overlap, root, MPI's int
// count limit) and then agrees with the other ranks, in one small MPI_Allreduce, that every rank's
// arguments are valid and that element type, counts and root match (argument_agreement.hpp). Wrong
// arguments therefore throw shardgraph::error on every rank together, before any data moves.
//
// Errors. The communicator's error handler is MPI_ERRORS_RETURN; every MPI return code is checked
// and becomes shardgraph::error naming the MPI call and the rank.
//
// Deadline. Every collective and recv is made of non-blocking MPI calls completed within the
// communicator's timeout (mpi::world's, default 5 minutes; deadline.hpp): a rank that never joins
// makes the others throw an error naming their rank, the collective and the MPI call, not hang.
//
// Point to point. send copies the data and returns without waiting for the matching recv
// (comm_state.hpp), as the threads backend does. recv takes the first message from `peer` with `tag`
// and requires it to hold exactly data.size() elements; a message of another size is consumed and
// reported. A rank does not send to itself.
//
// Buffers: spans of trivially copyable elements (any contiguous range, std::vector or std::array,
// through comm::all_reduce(c, range) and the other functions of comm/collectives.hpp); all_reduce and
// reduce_scatter need arithmetic ones (datatype.hpp). Inputs and outputs may overlap: all_gather(out.subspan(rank * n, n), out),
// reduce_scatter(in, in.subspan(rank * n, n)) and all_to_all(x, x) work in place.
//
// Threads. MPI is called from the calling thread only (MPI_THREAD_FUNNELED): use a communicator and
// its copies from one thread at a time.
//
// Ownership. A communicator owns its MPI_Comm (a duplicate or a split result); copies share it and
// the last one frees it, unless MPI has already been finalized. The reductions keep their working
// memory between calls.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "shardgraph/comm/communicator.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/mpi/argument_agreement.hpp"
#include "shardgraph/mpi/comm_state.hpp"
#include "shardgraph/mpi/datatype.hpp"
#include "shardgraph/mpi/deadline.hpp"
#include "shardgraph/mpi/mpi_call.hpp"
#include "shardgraph/mpi/mpi_header.hpp"
#include "shardgraph/mpi/rank_order_sum.hpp"

namespace shardgraph::mpi {

namespace detail {

template <class T>
bool overlaps(std::span<const T> a, std::span<const T> b) {
  if (a.empty() || b.empty()) return false;
  const std::less<const T*> before;
  return before(a.data(), b.data() + b.size()) && before(b.data(), a.data() + a.size());
}

// Slice j of an n-element buffer split over `parts` ranks as evenly as possible: the first n % parts
// slices hold one element more.
inline int slice_length(std::size_t n, int parts, int j) {
  const auto p = static_cast<std::size_t>(parts), q = static_cast<std::size_t>(j);
  return static_cast<int>(n / p + (q < n % p ? 1 : 0));
}
inline int slice_offset(std::size_t n, int parts, int j) {
  const auto p = static_cast<std::size_t>(parts), q = static_cast<std::size_t>(j);
  return static_cast<int>(q * (n / p) + std::min(q, n % p));
}

}  // namespace detail

class communicator {
 public:
  // A new communicator over the same processes as `parent` (MPI_Comm_dup; collective over parent),
  // with its own message space, so traffic here never matches traffic on `parent`. Its calls, and
  // those of the communicators split from it, fail after `timeout` instead of waiting for a rank
  // that does not join.
  static communicator duplicate(MPI_Comm parent, std::chrono::milliseconds timeout = default_timeout) {
    const std::string here = "mpi::communicator::duplicate";
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized == 0 || finalized != 0) {
      fail(here, finalized != 0 ? "MPI has already been finalized" : "MPI is not initialized",
           "create a shardgraph::mpi::world first and keep it alive while ranks communicate");
    }
    if (timeout <= std::chrono::milliseconds::zero())
      fail(here, "the timeout of " + std::to_string(timeout.count()) + " ms is not positive",
           "pass a positive timeout (the default is 5 minutes)");
    MPI_Comm copy = MPI_COMM_NULL;
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi_call(MPI_Comm_idup(parent, &copy, &request), "MPI_Comm_idup", here);
    wait_within(request, {timeout, 1}, "MPI_Comm_idup", here);
    return communicator(copy, timeout, here);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  // For code that calls MPI itself. The communicator keeps ownership.
  MPI_Comm native_handle() const { return comm(); }

  // In place: data becomes the elementwise sum of every rank's data, in rank order. (n) on every rank.
  template <class T>
  void all_reduce(std::span<T> data) {
    static_assert(!std::is_const_v<T>,
                  "shardgraph: all_reduce: data is summed in place. Pass a writable buffer.");
    require_summable<T>();
    const std::string here = where("all_reduce");
    const call_deadline deadline = state().begin_call();
    const std::string problem = count_problem(here, "data", data.size());
    agree(here, problem, {type_of<T>(), count_of("element count", data.size())}, deadline);
    if (size_ == 1 || data.empty()) return;

    const MPI_Datatype type = datatype_of<T>();
    std::vector<int> slice_counts(size_), slice_offsets(size_), mine_counts(size_), mine_offsets(size_);
    const int mine = detail::slice_length(data.size(), size_, rank_);
    for (int j = 0; j < size_; ++j) {
      slice_counts[j] = detail::slice_length(data.size(), size_, j);
      slice_offsets[j] = detail::slice_offset(data.size(), size_, j);
      mine_counts[j] = mine;
      mine_offsets[j] = j * mine;
    }
    // (size, mine): every rank's slice rank(); then (mine): their sum.
    const std::size_t received = static_cast<std::size_t>(size_) * static_cast<std::size_t>(mine);
    const std::span<T> scratch = state().template scratch<T>(received + static_cast<std::size_t>(mine));
    const std::span<T> contributions = scratch.first(received), sum = scratch.subspan(received);
    complete(deadline, "MPI_Ialltoallv", here, [&](MPI_Request* r) {
      return MPI_Ialltoallv(data.data(), slice_counts.data(), slice_offsets.data(), type,
                            contributions.data(), mine_counts.data(), mine_offsets.data(), type, comm(), r);
    });
    sum_in_rank_order(std::span<const T>(contributions), static_cast<std::size_t>(size_), sum);
    complete(deadline, "MPI_Iallgatherv", here, [&](MPI_Request* r) {
      return MPI_Iallgatherv(sum.data(), mine, type, data.data(), slice_counts.data(), slice_offsets.data(),
                             type, comm(), r);
    });
  }

  // out (size() * n) holds rank r's in (n) at offset r * n.
  template <class T>
  void all_gather(std::span<const T> in, std::span<T> out) {
    require_transferable<T>();
    const std::string here = where("all_gather");
    const call_deadline deadline = state().begin_call();
    std::string problem = count_problem(here, "in", in.size());
    if (problem.empty() && out.size() != static_cast<std::size_t>(size_) * in.size()) {
      problem = error_message(
          here,
          "out holds " + std::to_string(out.size()) + " elements but size() * in.size() is " +
              std::to_string(size_) + " * " + std::to_string(in.size()),
          "make out hold size() * in.size() elements: rank r's in lands at offset r * in.size()");
    }
    agree(here, problem, {type_of<T>(), count_of("in.size()", in.size())}, deadline);
    const MPI_Datatype type = datatype_of<T>();
    const int n = static_cast<int>(in.size());
    if (detail::overlaps(in, std::span<const T>(out))) {
      const std::span<T> copy = state().template scratch<T>(in.size());
      std::copy(in.begin(), in.end(), copy.begin());
      in = copy;
    }
    complete(deadline, "MPI_Iallgather", here, [&](MPI_Request* r) {
      return MPI_Iallgather(in.data(), n, type, out.data(), n, type, comm(), r);
    });
  }

  // in: (size(), n), chunk r at offset r * n; out: (n) = the sum over ranks of their chunk rank(), in
  // rank order.
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) {
    require_summable<T>();
    const std::string here = where("reduce_scatter");
    const call_deadline deadline = state().begin_call();
    std::string problem = count_problem(here, "out", out.size());
    if (problem.empty() && in.size() != static_cast<std::size_t>(size_) * out.size()) {
      problem = error_message(
          here,
          "in holds " + std::to_string(in.size()) + " elements but size() * out.size() is " +
              std::to_string(size_) + " * " + std::to_string(out.size()),
          "make in hold size() * out.size() elements: chunk r of in is summed into rank r's out");
    }
    agree(here, problem, {type_of<T>(), count_of("out.size()", out.size())}, deadline);
    if (out.empty()) return;
    const MPI_Datatype type = datatype_of<T>();
    const int n = static_cast<int>(out.size());
    // (size, n): chunk rank() of every rank. `in` is read in full before `out` is written, so out may lie in
    // in.
    const std::span<T> chunks = state().template scratch<T>(in.size());
    complete(deadline, "MPI_Ialltoall", here, [&](MPI_Request* r) {
      return MPI_Ialltoall(in.data(), n, type, chunks.data(), n, type, comm(), r);
    });
    sum_in_rank_order(std::span<const T>(chunks), static_cast<std::size_t>(size_), out);
  }

  // in, out: (size(), n). Chunk j of rank i's in lands in chunk i of rank j's out.
  template <class T>
  void all_to_all(std::span<const T> in, std::span<T> out) {
    require_transferable<T>();
    const std::string here = where("all_to_all");
    const call_deadline deadline = state().begin_call();
    const auto p = static_cast<std::size_t>(size_);
    std::string problem;
    if (in.size() != out.size()) {
      problem = error_message(
          here, "in holds " + std::to_string(in.size()) + " elements and out " + std::to_string(out.size()),
          "give in and out the same size: size() chunks of equal length");
    } else if (in.size() % p != 0) {
      problem = error_message(here,
                              std::to_string(in.size()) + " elements do not split into " +
                                  std::to_string(size_) + " equal chunks",
                              "make the size a multiple of size(): chunk j goes to rank j");
    } else {
      problem = count_problem(here, "one chunk", in.size() / p);
    }
    agree(here, problem, {type_of<T>(), count_of("in.size()", in.size())}, deadline);
    const MPI_Datatype type = datatype_of<T>();
    const int chunk = static_cast<int>(in.size() / p);
    if (detail::overlaps(in, std::span<const T>(out))) {
      const std::span<T> copy = state().template scratch<T>(in.size());
      std::copy(in.begin(), in.end(), copy.begin());
      in = copy;
    }
    complete(deadline, "MPI_Ialltoall", here, [&](MPI_Request* r) {
      return MPI_Ialltoall(in.data(), chunk, type, out.data(), chunk, type, comm(), r);
    });
  }

  // data on every rank becomes data on `root`.
  template <class T>
  void broadcast(std::span<T> data, int root) {
    static_assert(!std::is_const_v<T>, "shardgraph: broadcast: data is overwritten. Pass a writable buffer.");
    require_transferable<T>();
    const std::string here = where("broadcast");
    const call_deadline deadline = state().begin_call();
    std::string problem = count_problem(here, "data", data.size());
    if (problem.empty() && (root < 0 || root >= size_)) {
      problem = error_message(here,
                              "root " + std::to_string(root) + " is not a rank of this communicator (0.." +
                                  std::to_string(size_ - 1) + ")",
                              "pass a root in [0, size())");
    }
    agree(here, problem,
          {type_of<T>(), count_of("element count", data.size()),
           agreed_value{"root", problem.empty() ? root : 0, nullptr}},
          deadline);
    complete(deadline, "MPI_Ibcast", here, [&](MPI_Request* r) {
      return MPI_Ibcast(data.data(), static_cast<int>(data.size()), datatype_of<T>(), root, comm(), r);
    });
  }

  // Copies data and returns: it does not wait for the matching recv.
  template <class T>
  void send(std::span<const T> data, int peer, int tag = 0) {
    require_transferable<T>();
    const std::string here = where("send");
    check_point_to_point(here, peer, tag, data.size());
    state().send_copy(std::as_bytes(data), static_cast<int>(data.size()), datatype_of<T>(), peer, tag, here);
  }

  // Waits for the first message from peer with tag; it must hold data.size() elements of T.
  template <class T>
  void recv(std::span<T> data, int peer, int tag = 0) {
    static_assert(!std::is_const_v<T>, "shardgraph: recv: data is overwritten. Pass a writable buffer.");
    require_transferable<T>();
    const std::string here = where("recv");
    check_point_to_point(here, peer, tag, data.size());
    const MPI_Datatype type = datatype_of<T>();
    const call_deadline deadline = state().begin_call();
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    probe_within(deadline, peer, tag, message, status, here);
    int count = 0;
    check_mpi_call(MPI_Get_count(&status, type, &count), "MPI_Get_count", here);
    if (count != MPI_UNDEFINED && static_cast<std::size_t>(count) == data.size()) {
      complete(deadline, "MPI_Imrecv", here,
               [&](MPI_Request* r) { return MPI_Imrecv(data.data(), count, type, &message, r); });
      return;
    }
    // Consume the message anyway, so that the next recv from this peer and tag gets the next one.
    int bytes = 0;
    check_mpi_call(MPI_Get_count(&status, MPI_BYTE, &bytes), "MPI_Get_count", here);
    std::vector<unsigned char> discarded(static_cast<std::size_t>(bytes));
    complete(deadline, "MPI_Imrecv", here,
             [&](MPI_Request* r) { return MPI_Imrecv(discarded.data(), bytes, MPI_BYTE, &message, r); });
    const std::string type_name = type_code_name(type_code<T>());
    const std::string held =
        count == MPI_UNDEFINED
            ? std::to_string(bytes) + " bytes, not a whole number of " + type_name + " elements"
            : std::to_string(count) + " " + type_name + " elements";
    fail(here,
         "the message from rank " + std::to_string(peer) + " with tag " + std::to_string(tag) + " holds " +
             held + " but data holds " + std::to_string(data.size()),
         "receive into a buffer of the size and element type that the matching send used");
  }

  void barrier() {
    const std::string here = where("barrier");
    complete(state().begin_call(), "MPI_Ibarrier", here,
             [&](MPI_Request* r) { return MPI_Ibarrier(comm(), r); });
  }

  // Collective: a communicator of the ranks that pass the same color, ordered by key, then by rank
  // here. Any int is a color: the colors are gathered and numbered 0, 1, ... in increasing order
  // (MPI_Comm_split accepts only colors of 0 or more), at the cost of one MPI_Allgather of ints.
  communicator split(int color, int key) const {
    const std::string here = where("split");
    std::vector<int> colors(static_cast<std::size_t>(size_));
    complete(state().begin_call(), "MPI_Iallgather", here, [&](MPI_Request* r) {
      return MPI_Iallgather(&color, 1, MPI_INT, colors.data(), 1, MPI_INT, comm(), r);
    });
    std::sort(colors.begin(), colors.end());
    const auto distinct_end = std::unique(colors.begin(), colors.end());
    const int index =
        static_cast<int>(std::lower_bound(colors.begin(), distinct_end, color) - colors.begin());
    MPI_Comm part = MPI_COMM_NULL;
    // MPI has no non-blocking split; the gather above has just seen every rank arrive.
    check_mpi_call(MPI_Comm_split(comm(), index, key, &part), "MPI_Comm_split", here);
    return communicator(part, state().timeout(), here);
  }


 private:
  // Takes ownership of `comm` at once, so that it is freed even if a later step throws.
  communicator(MPI_Comm comm, std::chrono::milliseconds timeout, std::string_view here)
      : handle_(std::make_shared<detail::comm_state>(comm, timeout)) {
    check_mpi_call(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", here);
    check_mpi_call(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank", here);
    check_mpi_call(MPI_Comm_size(comm, &size_), "MPI_Comm_size", here);
    int* upper = nullptr;
    int found = 0;
    check_mpi_call(MPI_Comm_get_attr(comm, MPI_TAG_UB, &upper, &found), "MPI_Comm_get_attr(MPI_TAG_UB)",
                   here);
    if (found != 0 && upper != nullptr) tag_upper_bound_ = *upper;
  }

  detail::comm_state& state() const {
    if (!handle_) {
      fail("mpi::communicator", "this communicator was moved from and owns no MPI communicator",
           "use the communicator it was moved into");
    }
    return *handle_;
  }
  MPI_Comm comm() const { return state().get(); }

  std::string where(std::string_view operation) const {
    return "mpi::communicator::" + std::string(operation) + " on rank " + std::to_string(rank_) + " of " +
           std::to_string(size_);
  }

  template <class T>
  static void require_transferable() {
    static_assert(transferable<T>,
                  "shardgraph: mpi::communicator: the elements are not trivially copyable. Move plain data.");
  }
  template <class T>
  static void require_summable() {
    static_assert(
        summable<T>,
        "shardgraph: mpi::communicator: all_reduce and reduce_scatter sum arithmetic elements (not bool). "
        "Sum numbers.");
  }

  template <class T>
  static agreed_value type_of() {
    return agreed_value{"element type", type_code<T>(), &type_code_name};
  }
  static agreed_value count_of(std::string_view name, std::size_t count) {
    return agreed_value{
        name, count > static_cast<std::size_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(count),
        nullptr};
  }

  // MPI counts are int; larger buffers would be silently truncated.
  static std::string count_problem(std::string_view here, std::string_view name, std::size_t count) {
    if (count <= static_cast<std::size_t>(INT_MAX)) return {};
    return error_message(here,
                         std::string(name) + " holds " + std::to_string(count) +
                             " elements, more than MPI's count limit " + std::to_string(INT_MAX),
                         "split the data into several calls");
  }

  void agree(std::string_view here, const std::string& problem, std::initializer_list<agreed_value> values,
             const call_deadline& deadline) const {
    check_arguments_agree(comm(), rank_, here, problem, values, deadline);
  }

  // Starts a non-blocking MPI call (start(&request) returns its code) and waits for it within the
  // deadline.
  template <class Start>
  static void complete(const call_deadline& deadline, std::string_view call, std::string_view here,
                       Start&& start) {
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi_call(start(&request), call, here);
    wait_within(request, deadline, call, here);
  }

  // MPI_Improbe until a message from peer with tag arrives, within the deadline.
  void probe_within(const call_deadline& deadline, int peer, int tag, MPI_Message& message,
                    MPI_Status& status, std::string_view here) const {
    const auto end = std::chrono::steady_clock::now() + deadline.timeout;
    for (poll_pace pace;; pace.after_poll()) {
      int found = 0;
      check_mpi_call(MPI_Improbe(peer, tag, comm(), &found, &message, &status), "MPI_Improbe", here);
      if (found != 0) return;
      if (std::chrono::steady_clock::now() > end)
        fail(here,
             "no message from rank " + std::to_string(peer) + " with tag " + std::to_string(tag) +
                 " arrived within " + std::to_string(deadline.timeout.count()) + " ms",
             "Pair every recv with a send of the same tag on the peer and check that the peer is still "
             "running, or give mpi::world a longer timeout");
    }
  }

  void check_point_to_point(std::string_view here, int peer, int tag, std::size_t count) const {
    if (peer < 0 || peer >= size_) {
      fail(here,
           "peer " + std::to_string(peer) + " is not a rank of this communicator (0.." +
               std::to_string(size_ - 1) + ")",
           "pass a peer in [0, size())");
    }
    if (peer == rank_) {
      fail(here, "peer " + std::to_string(peer) + " is this rank itself",
           "pass another rank; copy the data locally instead of sending it to the same rank");
    }
    if (tag < 0 || tag > tag_upper_bound_) {
      fail(here, "tag " + std::to_string(tag) + " is outside 0.." + std::to_string(tag_upper_bound_),
           "pass a tag in that range (MPI_TAG_UB of this MPI)");
    }
    const std::string problem = count_problem(here, "data", count);
    if (!problem.empty()) throw error(problem);
  }

  std::shared_ptr<detail::comm_state> handle_;
  int rank_ = 0;
  int size_ = 0;
  int tag_upper_bound_ = 32767;  // the least MPI guarantees
};

static_assert(comm::Communicator<communicator>);

}  // namespace shardgraph::mpi
