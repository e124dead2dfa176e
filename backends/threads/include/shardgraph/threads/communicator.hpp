#pragma once
// communicator: one rank's handle on a group of ranks that are threads of one process. It satisfies
// shardgraph::comm::Communicator (comm/communicator.hpp states the contract); copies are cheap and
// share the group. Made by world::run and by split.
//
// Each collective is one rendezvous of the group (group.hpp): every rank posts pointers to its
// buffers, waits for all, computes its own part by reading its peers' buffers, and waits for all
// again before returning. Sums are taken in rank order 0, 1, ..., size-1, so every rank gets the
// same bits, run after run. The name of the collective, the element type and every buffer size are
// checked on every rank against every other rank's, so a mismatch throws the same shardgraph::error
// on every rank instead of crashing or hanging.
//
// Buffers: spans of trivially copyable elements (any contiguous range, std::vector or std::array,
// through comm::all_reduce(c, range) and the other functions of comm/collectives.hpp); all_reduce
// and reduce_scatter need arithmetic elements. Inputs and outputs must not
// overlap, except in the in-place forms all_gather(out.subspan(rank * n, n), out) and
// reduce_scatter(in, in.subspan(rank * n, n)).
#include <shardgraph/comm/communicator.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/core/half_types.hpp>
#include <shardgraph/threads/group.hpp>
#include <shardgraph/threads/text.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardgraph::threads {

class world;

class communicator {
 public:
  int rank() const { return rank_; }
  int size() const { return group_->size(); }

  // In place: data becomes the elementwise sum of every rank's data. (n) on every rank.
  template <class T>
  void all_reduce(std::span<T> data) {
    static_assert(!std::is_const_v<T>,
                  "shardgraph: all_reduce: data is summed in place. Pass a writable buffer");
    static_assert(summable<T>, "shardgraph: all_reduce: the elements are not arithmetic. Sum numbers");
    collective(make_slot<T>("all_reduce", data, data), [&] {
      check_equal_counts("all_reduce", &detail::slot::in_count, "data");
      sum_owned_range<T>();
    });
  }

  // out = every rank's in, in rank order. in: (n), out: (size * n).
  template <class T>
  void all_gather(std::span<const T> in, std::span<T> out) {
    static_assert(movable<T>,
                  "shardgraph: all_gather: the elements are not trivially copyable. Move plain data");
    collective(make_slot<T>("all_gather", in, out), [&] {
      check_equal_counts("all_gather", &detail::slot::in_count, "in");
      check_out_is_size_times_in("all_gather");
      check_no_overlap<T>("all_gather", &detail::slot::in_count, /*in_inside_out=*/true);
      const auto n = in.size();
      for (int r = 0; r < size(); ++r) {
        const auto* source = static_cast<const T*>(slot(r).in);
        T* destination = out.data() + r * n;
        if (source != destination) std::copy_n(source, n, destination);
      }
    });
  }

  // out = chunk `rank` of the elementwise sum of every rank's in. in: (size * n), out: (n).
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) {
    static_assert(summable<T>, "shardgraph: reduce_scatter: the elements are not arithmetic. Sum numbers");
    collective(make_slot<T>("reduce_scatter", in, out), [&] {
      check_equal_counts("reduce_scatter", &detail::slot::out_count, "out");
      check_in_is_size_times_out("reduce_scatter");
      check_no_overlap<T>("reduce_scatter", &detail::slot::out_count, /*in_inside_out=*/false);
      const auto n = out.size();
      const auto offset = static_cast<std::size_t>(rank_) * n;
      for (std::size_t i = 0; i < n; ++i) {
        T sum = static_cast<const T*>(slot(0).in)[offset + i];
        for (int r = 1; r < size(); ++r)
          sum = static_cast<T>(sum + static_cast<const T*>(slot(r).in)[offset + i]);
        out[i] = sum;
      }
    });
  }

  // Chunk j of rank i's in lands in chunk i of rank j's out. in, out: (size * n).
  template <class T>
  void all_to_all(std::span<const T> in, std::span<T> out) {
    static_assert(movable<T>,
                  "shardgraph: all_to_all: the elements are not trivially copyable. Move plain data");
    collective(make_slot<T>("all_to_all", in, out), [&] {
      check_equal_counts("all_to_all", &detail::slot::in_count, "in");
      check_all_to_all_counts();
      check_no_overlap<T>("all_to_all", nullptr, /*in_inside_out=*/false);
      const auto n = in.size() / static_cast<std::size_t>(size());
      for (int r = 0; r < size(); ++r)
        std::copy_n(static_cast<const T*>(slot(r).in) + rank_ * n, n, out.data() + r * n);
    });
  }

  // data on every rank becomes root's data. (n) on every rank.
  template <class T>
  void broadcast(std::span<T> data, int root) {
    static_assert(!std::is_const_v<T>, "shardgraph: broadcast: data is overwritten. Pass a writable buffer");
    static_assert(movable<T>,
                  "shardgraph: broadcast: the elements are not trivially copyable. Move plain data");
    auto mine = make_slot<T>("broadcast", data, data);
    mine.root = root;
    collective(std::move(mine), [&] {
      check_equal_counts("broadcast", &detail::slot::in_count, "data");
      check_root();
      if (rank_ != root) std::copy_n(static_cast<const T*>(slot(root).in), data.size(), data.data());
    });
  }

  // Copies data into peer's inbox and returns: it does not wait for the matching recv.
  template <class T>
  void send(std::span<const T> data, int peer, int tag = 0) {
    static_assert(movable<T>, "shardgraph: send: the elements are not trivially copyable. Send plain data");
    check_peer("send", peer);
    detail::message m{rank_, tag, detail::element_type_of<T>(), data.size(),
                      std::vector<std::byte>(data.size_bytes())};
    if (!data.empty()) std::memcpy(m.bytes.data(), data.data(), data.size_bytes());
    group_->deposit(peer, std::move(m));
  }

  // Blocks until the first message from peer with tag arrives; it must hold data.size() elements of T.
  template <class T>
  void recv(std::span<T> data, int peer, int tag = 0) {
    static_assert(!std::is_const_v<T>, "shardgraph: recv: data is overwritten. Pass a writable buffer");
    static_assert(movable<T>,
                  "shardgraph: recv: the elements are not trivially copyable. Receive plain data");
    check_peer("recv", peer);
    const auto m = group_->take(rank_, peer, tag);
    const auto type = detail::element_type_of<T>();
    if (m.type != type || m.count != data.size())
      group_->raise(
          rank_, "recv",
          detail::text("rank ", peer, " sent ", m.count, " ", m.type.name, " elements with tag ", tag,
                       " but rank ", rank_, " receives ", data.size(), " ", type.name, " elements"),
          "Receive into a buffer of the size and element type that was sent");
    if (!data.empty()) std::memcpy(data.data(), m.bytes.data(), data.size_bytes());
  }

  void barrier() {
    collective(detail::slot{.op = "barrier"}, [] {});
  }

  // Two groups of one rank may be called at once from two threads (comm/comm_worker.hpp): each
  // group keeps its own rendezvous state.
  bool allows_concurrent_groups() const { return true; }

  // Makes every rank's pending and next call throw, naming this rank and `why`. For a rank that
  // unwinds from its own error while another of its threads waits for peers in a call
  // (comm_worker): the error its function ends with then replaces `why` as the one run() rethrows.
  void abort(std::string_view why) const {
    const std::string message =
        error_message(group_->where("abort", rank_), why,
                      "Fix this rank's own error; the other ranks stop instead of waiting");
    group_->world()->fail(group_->world_rank(rank_), std::make_exception_ptr(error(message)),
                          /*provisional=*/true);
  }

  // A communicator of the ranks of this group that pass the same color, ordered by key, then by
  // rank in this group. Collective over this group; the new groups work independently of each other.
  communicator split(int color, int key) const {
    group_->arrive(rank_, detail::slot{.op = "split", .color = color, .key = key});
    check_same_call("split");
    std::vector<int> members;  // (new size) -> rank in this group
    for (int r = 0; r < size(); ++r)
      if (slot(r).color == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return slot(a).key < slot(b).key; });
    const auto new_rank =
        static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    // The first member makes the group and leaves it in its slot for the others to take.
    if (new_rank == 0) {
      std::vector<int> world_ranks;
      world_ranks.reserve(members.size());
      for (int r : members) world_ranks.push_back(group_->world_rank(r));
      group_->own_slot(rank_).created =
          std::make_shared<detail::group>(group_->world(), std::move(world_ranks));
    }
    group_->depart(rank_, "split");
    communicator made(slot(members[0]).created, new_rank);
    group_->depart(rank_, "split");  // every member has taken the group: the first may reuse its slot
    return made;
  }


 private:
  friend class world;
  communicator(std::shared_ptr<detail::group> group, int rank) : group_(std::move(group)), rank_(rank) {}

  template <class T>
  static constexpr bool movable = std::is_trivially_copyable_v<T>;
  template <class T>
  static constexpr bool summable = (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) || is_half_float_v<T>;

  template <class T>
  static detail::slot make_slot(std::string_view op, std::span<const T> in, std::span<T> out) {
    return {.op = op,
            .type = detail::element_type_of<std::remove_const_t<T>>(),
            .in = in.data(),
            .in_count = in.size(),
            .out = const_cast<std::remove_const_t<T>*>(out.data()),
            .out_count = out.size()};
  }

  // Arrive, check and compute (`work` reads any slot and peers' buffers), depart.
  template <class Work>
  void collective(detail::slot mine, Work&& work) const {
    const auto op = mine.op;
    group_->arrive(rank_, std::move(mine));
    check_same_call(op);
    work();
    group_->depart(rank_, op);
  }

  [[noreturn]] void raise(std::string_view op, std::string_view why, std::string_view how) const {
    group_->raise(rank_, op, why, how);
  }

  const detail::slot& slot(int rank) const { return group_->slot_of(rank); }

  // The checks below read every rank's slot, so every rank finds the same mismatch and throws.
  void check_same_call(std::string_view op) const {
    for (int r = 1; r < size(); ++r) {
      if (slot(r).op != slot(0).op)
        raise(op, detail::text("rank 0 called ", slot(0).op, " but rank ", r, " called ", slot(r).op),
              "Call the same collectives in the same order on every rank of the group");
      if (slot(r).type != slot(0).type)
        raise(op,
              detail::text("rank 0 passes ", slot(0).type.name, " elements but rank ", r, " passes ",
                           slot(r).type.name, " elements"),
              "Pass buffers of the same element type on every rank of the group");
    }
  }

  void check_equal_counts(std::string_view op, std::size_t detail::slot::*count,
                          std::string_view buffer) const {
    for (int r = 1; r < size(); ++r)
      if (slot(r).*count != slot(0).*count)
        raise(op,
              detail::text("rank ", r, "'s ", buffer, " holds ", slot(r).*count,
                           " elements but rank 0's holds ", slot(0).*count),
              "Pass buffers of the same size on every rank of the group");
  }

  void check_out_is_size_times_in(std::string_view op) const {
    const auto p = static_cast<std::size_t>(size());
    for (int r = 0; r < size(); ++r)
      if (slot(r).out_count != p * slot(r).in_count)
        raise(op,
              detail::text("rank ", r, "'s out holds ", slot(r).out_count, " elements but ", op,
                           " needs size() * in.size() = ", p, " * ", slot(r).in_count, " = ",
                           p * slot(r).in_count),
              "Give out size() * in.size() elements");
  }

  void check_in_is_size_times_out(std::string_view op) const {
    const auto p = static_cast<std::size_t>(size());
    for (int r = 0; r < size(); ++r)
      if (slot(r).in_count != p * slot(r).out_count)
        raise(op,
              detail::text("rank ", r, "'s in holds ", slot(r).in_count, " elements but ", op,
                           " needs size() * out.size() = ", p, " * ", slot(r).out_count, " = ",
                           p * slot(r).out_count),
              "Give in size() * out.size() elements");
  }

  void check_all_to_all_counts() const {
    const auto p = static_cast<std::size_t>(size());
    for (int r = 0; r < size(); ++r) {
      if (slot(r).out_count != slot(r).in_count)
        raise("all_to_all",
              detail::text("rank ", r, "'s out holds ", slot(r).out_count, " elements but its in holds ",
                           slot(r).in_count),
              "Give in and out the same size");
      if (slot(r).in_count % p != 0)
        raise("all_to_all",
              detail::text("rank ", r, "'s in holds ", slot(r).in_count,
                           " elements, which do not split into ", p, " equal chunks"),
              "Give in and out a multiple of size() elements");
    }
  }

  // In and out of one rank must not overlap; where `chunk` is given, the in-place form is allowed:
  // the smaller buffer is exactly chunk `rank` of the larger one (`in_inside_out` says which is which).
  template <class T>
  void check_no_overlap(std::string_view op, std::size_t detail::slot::*chunk, bool in_inside_out) const {
    for (int r = 0; r < size(); ++r) {
      const auto& s = slot(r);
      const auto* in = static_cast<const T*>(s.in);
      const auto* out = static_cast<const T*>(s.out);
      const std::less<const T*> before;
      const bool overlap =
          s.in_count > 0 && s.out_count > 0 && before(in, out + s.out_count) && before(out, in + s.in_count);
      if (!overlap) continue;
      if (chunk != nullptr) {
        const auto at = static_cast<std::size_t>(r) * (s.*chunk);
        if (in_inside_out ? in == out + at : out == in + at) continue;
      }
      raise(op, detail::text("rank ", r, "'s in and out overlap"),
            chunk == nullptr ? "Pass separate buffers"
            : in_inside_out  ? "Pass separate buffers, or in = out.subspan(rank() * n, n) to gather in place"
                            : "Pass separate buffers, or out = in.subspan(rank() * n, n) to reduce in place");
    }
  }

  void check_root() const {
    for (int r = 0; r < size(); ++r) {
      if (slot(r).root != slot(0).root)
        raise(
            "broadcast",
            detail::text("rank 0 passes root ", slot(0).root, " but rank ", r, " passes root ", slot(r).root),
            "Pass the same root on every rank of the group");
    }
    if (slot(0).root < 0 || slot(0).root >= size())
      raise("broadcast", detail::text("root ", slot(0).root, " is not a rank of this group of ", size()),
            "Pass a root in [0, size())");
  }

  void check_peer(std::string_view op, int peer) const {
    if (peer < 0 || peer >= size())
      raise(op, detail::text("peer ", peer, " is not a rank of this group of ", size()),
            "Pass a peer in [0, size())");
    if (peer == rank_)
      raise(op, detail::text("rank ", rank_, " names itself as the peer"),
            "Pass another rank; copy the data locally instead of sending it to the same rank");
  }

  // Every rank sums the elements it owns (its even share of [0, n)) over all ranks, in rank order,
  // and writes the sum into every rank's buffer: no element is touched by two ranks.
  template <class T>
  void sum_owned_range() const {
    const auto n = slot(0).in_count;
    const auto p = static_cast<std::size_t>(size());
    const auto r = static_cast<std::size_t>(rank_);
    const auto first = n * r / p, last = n * (r + 1) / p;
    std::vector<T*> data(p);
    for (std::size_t q = 0; q < p; ++q) data[q] = static_cast<T*>(slot(static_cast<int>(q)).out);
    for (auto i = first; i < last; ++i) {
      T sum = data[0][i];
      for (std::size_t q = 1; q < p; ++q) sum = static_cast<T>(sum + data[q][i]);
      for (std::size_t q = 0; q < p; ++q) data[q][i] = sum;
    }
  }

  std::shared_ptr<detail::group> group_;
  int rank_ = 0;
};

}  // namespace shardgraph::threads
