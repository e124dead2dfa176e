#pragma once
// communicator: one rank's handle on a group of GPUs, over NCCL. It satisfies
// shardgraph::comm::Communicator (comm/communicator.hpp states the contract) with the same methods
// as threads::communicator; copies are cheap and share the NCCL communicator. Made by world::run
// and by split.
//
// DEVICE MEMORY: every span passed to it points to device memory of this communicator's GPU
// (device()), e.g. cuda::device_buffer::view<float>(); a span of host memory (a std::vector, a
// host array) is rejected with an error before NCCL sees it. Sizes are in elements, as in the
// contract.
//
// Each call runs on the communicator's own CUDA stream (stream()) and returns once that stream has
// finished it, so the buffers may be reused, and read on the host after a copy, as soon as it
// returns. Work that the caller queued on other streams is not waited for: synchronize it first.
// A call that does not finish within the world's timeout, or that fails, aborts the NCCL
// communicator and throws shardgraph::error naming the rank, the call and NCCL's error string
// (comm_state.hpp); the other ranks of this process then throw too.
//
// Where it differs from the contract, because NCCL does:
//  - Sums are not taken in rank order 0, 1, ..., size-1: NCCL chooses the order (ring, tree, ...)
//    by size and topology. all_reduce still gives identical bits on every rank of one call, and
//    run-to-run results are reproducible for one NCCL version, topology and configuration; they
//    can differ from the threads and mpi backends (and between sizes) in the last bits of floats.
//  - The checks that need every rank's arguments (same sizes, same root, same call order) are not
//    made: a mismatch hangs the NCCL call, which then ends in the timeout error.
//  - send/recv: NCCL has no tags. Messages between two ranks match in the order they are posted;
//    `tag` is accepted for the Communicator API and is not checked. A send returns when its recv
//    has taken the data, so two ranks that both send to each other first wait for each other until
//    the timeout: let one of them receive first.
//
// Elements: element_type.hpp (moves take any trivially copyable type; sums take float, double and
// 8-, 32- and 64-bit integers, not std::uint16_t, which holds bf16 bits here).
#include <shardgraph/comm/communicator.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/device_guard.hpp>
#include <shardgraph/cuda/text.hpp>
#include <shardgraph/nccl/check.hpp>
#include <shardgraph/nccl/comm_state.hpp>
#include <shardgraph/nccl/element_type.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace shardgraph::nccl {

class world;

class communicator {
 public:
  int rank() const { return state_->rank(); }
  int size() const { return state_->size(); }
  // The GPU this rank's buffers live on, and the stream its calls run on.
  int device() const { return state_->device(); }
  cudaStream_t stream() const { return state_->stream(); }

  // In place: data becomes the elementwise sum of every rank's data. (n) on every rank.
  template <class T>
  void all_reduce(std::span<T> data) {
    static_assert(!std::is_const_v<T>,
                  "shardgraph: nccl all_reduce: data is summed in place. Pass a writable buffer");
    require_summable<T>();
    call("all_reduce", [&] {
      check_device_memory("all_reduce", "data", data.data(), data.size_bytes());
      if (data.empty()) return;
      check("all_reduce", "ncclAllReduce",
            ncclAllReduce(data.data(), data.data(), data.size(), detail::sum_type_of<T>(), ncclSum,
                          state_->comm(), state_->stream()));
    });
  }

  // out = every rank's in, in rank order. in: (n), out: (size * n). In place: in = out.subspan(rank * n, n).
  template <class T>
  void all_gather(std::span<const T> in, std::span<T> out) {
    require_movable<T>();
    call("all_gather", [&] {
      check_size_times("all_gather", "out", out.size(), "in", in.size());
      check_no_overlap<T>("all_gather", in.data(), in.size(), out.data(), out.size(), /*in_inside_out=*/true);
      check_device_memory("all_gather", "in", in.data(), in.size_bytes());
      check_device_memory("all_gather", "out", out.data(), out.size_bytes());
      if (in.empty()) return;
      check(
          "all_gather", "ncclAllGather",
          ncclAllGather(in.data(), out.data(), in.size_bytes(), ncclUint8, state_->comm(), state_->stream()));
    });
  }

  // out = chunk `rank` of the elementwise sum of every rank's in. in: (size * n), out: (n).
  // In place: out = in.subspan(rank * n, n).
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) {
    require_summable<T>();
    call("reduce_scatter", [&] {
      check_size_times("reduce_scatter", "in", in.size(), "out", out.size());
      check_no_overlap<T>("reduce_scatter", in.data(), in.size(), out.data(), out.size(),
                          /*in_inside_out=*/false);
      check_device_memory("reduce_scatter", "in", in.data(), in.size_bytes());
      check_device_memory("reduce_scatter", "out", out.data(), out.size_bytes());
      if (out.empty()) return;
      check("reduce_scatter", "ncclReduceScatter",
            ncclReduceScatter(in.data(), out.data(), out.size(), detail::sum_type_of<T>(), ncclSum,
                              state_->comm(), state_->stream()));
    });
  }

  // Chunk j of rank i's in lands in chunk i of rank j's out. in, out: (size * n). One grouped
  // ncclSend/ncclRecv per peer, this rank included.
  template <class T>
  void all_to_all(std::span<const T> in, std::span<T> out) {
    require_movable<T>();
    call("all_to_all", [&] {
      check_all_to_all_sizes(in.size(), out.size());
      check_no_overlap<T>("all_to_all", in.data(), in.size(), out.data(), out.size(), std::nullopt);
      check_device_memory("all_to_all", "in", in.data(), in.size_bytes());
      check_device_memory("all_to_all", "out", out.data(), out.size_bytes());
      if (in.empty()) return;
      const std::size_t chunk_bytes = in.size_bytes() / static_cast<std::size_t>(size());
      const auto* source = reinterpret_cast<const std::byte*>(in.data());
      auto* destination = reinterpret_cast<std::byte*>(out.data());
      grouped("all_to_all", [&](auto&& issue) {
        for (int peer = 0; peer < size(); ++peer) {
          const auto offset = static_cast<std::size_t>(peer) * chunk_bytes;
          issue("ncclSend",
                ncclSend(source + offset, chunk_bytes, ncclUint8, peer, state_->comm(), state_->stream()));
          issue("ncclRecv", ncclRecv(destination + offset, chunk_bytes, ncclUint8, peer, state_->comm(),
                                     state_->stream()));
        }
      });
    });
  }

  // data on every rank becomes root's data. (n) on every rank.
  template <class T>
  void broadcast(std::span<T> data, int root) {
    static_assert(!std::is_const_v<T>,
                  "shardgraph: nccl broadcast: data is overwritten. Pass a writable buffer");
    require_movable<T>();
    call("broadcast", [&] {
      if (root < 0 || root >= size())
        fail(state_->where("broadcast"),
             cuda::detail::text("root ", root, " is not a rank of this group of ", size()),
             "Pass a root in [0, size())");
      check_device_memory("broadcast", "data", data.data(), data.size_bytes());
      if (data.empty()) return;
      check("broadcast", "ncclBroadcast",
            ncclBroadcast(data.data(), data.data(), data.size_bytes(), ncclUint8, root, state_->comm(),
                          state_->stream()));
    });
  }

  // Sends data to peer; returns once peer's matching recv has taken it (see the top of this file).
  template <class T>
  void send(std::span<const T> data, int peer, int tag = 0) {
    require_movable<T>();
    call("send", [&] {
      check_peer("send", peer, tag);
      check_device_memory("send", "data", data.data(), data.size_bytes());
      if (data.empty()) return;
      check("send", "ncclSend",
            ncclSend(data.data(), data.size_bytes(), ncclUint8, peer, state_->comm(), state_->stream()));
    });
  }

  // Receives the next message from peer, which must hold data.size() elements of T.
  template <class T>
  void recv(std::span<T> data, int peer, int tag = 0) {
    static_assert(!std::is_const_v<T>, "shardgraph: nccl recv: data is overwritten. Pass a writable buffer");
    require_movable<T>();
    call("recv", [&] {
      check_peer("recv", peer, tag);
      check_device_memory("recv", "data", data.data(), data.size_bytes());
      if (data.empty()) return;
      check("recv", "ncclRecv",
            ncclRecv(data.data(), data.size_bytes(), ncclUint8, peer, state_->comm(), state_->stream()));
    });
  }

  // Returns once every rank of the group has called barrier (a one-element all_reduce).
  void barrier() {
    call("barrier", [&] {
      check("barrier", "ncclAllReduce",
            ncclAllReduce(state_->scratch(), state_->scratch(), 1, ncclUint32, ncclSum, state_->comm(),
                          state_->stream()));
    });
  }

  // Two communicators of one rank may be called at once from two threads (comm/comm_worker.hpp):
  // each has its own NCCL communicator and stream, so a gradient bucket's all_reduce runs on the
  // GPU next to the compute stream's kernels.
  bool allows_concurrent_groups() const { return true; }

  // Records this rank as failed, for a rank that unwinds from its own error while another of its
  // threads waits in a call: that call, and every pending or next call of this process's ranks,
  // then aborts its NCCL communicator and throws. Ranks of other processes end at their timeout.
  void abort(std::string_view why) const {
    state_->world()->fail(
        state_->world_rank(),
        error_message(state_->where("abort"), why,
                      "Fix this rank's own error; the other ranks stop instead of waiting"));
  }

  // A communicator of the ranks of this group that pass the same color, ordered by key, then by
  // rank in this group (ncclCommSplit). Collective over this group; color >= 0. The new
  // communicator has its own stream and NCCL communicator on the same GPU.
  communicator split(int color, int key) const {
    auto& state = *state_;
    state.check_usable("split");
    if (color < 0)
      fail(state.where("split"), cuda::detail::text("color ", color, " is negative"),
           "Pass a color >= 0 (NCCL reserves negative colors)");
    const cuda::device_guard on(state.device());
    ncclConfig_t config = detail::non_blocking_config();
    ncclComm_t made = nullptr;
    try {
      state.check_call(ncclCommSplit(state.comm(), color, key, &made, &config), "split", "ncclCommSplit");
      const auto deadline = std::chrono::steady_clock::now() + state.world()->timeout();
      for (int round = 0;; ++round) {
        ncclResult_t parent = ncclSuccess, child = ncclSuccess;
        state.check_call(ncclCommGetAsyncError(state.comm(), &parent), "split", "ncclCommGetAsyncError");
        if (made != nullptr)
          state.check_call(ncclCommGetAsyncError(made, &child), "split",
                           "ncclCommGetAsyncError (new communicator)");
        if (parent != ncclSuccess && parent != ncclInProgress)
          state.abort_and_fail("split", detail::describe("ncclCommSplit", parent, state.comm()),
                               detail::how_to_fix(parent));
        if (child != ncclSuccess && child != ncclInProgress)
          state.abort_and_fail("split", detail::describe("ncclCommSplit", child, made),
                               detail::how_to_fix(child));
        if (parent == ncclSuccess && child == ncclSuccess) break;
        state.poll_peers_and_deadline("split", deadline);
        detail::pause_between_polls(round);
      }
      if (made == nullptr)
        state.abort_and_fail("split", "ncclCommSplit made no communicator for a color >= 0",
                             "Run with NCCL_DEBUG=WARN for details");
    } catch (...) {
      if (made != nullptr) static_cast<void>(ncclCommAbort(made));
      throw;
    }
    return communicator(std::make_shared<detail::comm_state>(made, state.device(), state.world_rank(),
                                                             /*is_world=*/false, state.world()));
  }


 private:
  friend class world;
  explicit communicator(std::shared_ptr<detail::comm_state> state) : state_(std::move(state)) {}

  template <class T>
  static constexpr void require_summable() {
    static_assert(!detail::is_16_bit_integer<std::remove_const_t<T>>,
                  "shardgraph: nccl sum: 16-bit integer elements cannot be summed (std::uint16_t holds bf16 "
                  "bits, whose integer sum means nothing, and NCCL has no 16-bit integer type). Sum float "
                  "elements: widen bf16 to float first");
    static_assert(detail::is_16_bit_integer<std::remove_const_t<T>> || detail::summable<T>,
                  "shardgraph: nccl sum: NCCL cannot sum these elements. Sum float, double or 8-, 32- or "
                  "64-bit integers");
  }
  template <class T>
  static constexpr void require_movable() {
    static_assert(detail::movable<std::remove_const_t<T>>,
                  "shardgraph: nccl: the elements are not trivially copyable. Move plain data");
  }

  // Checks that the communicator is usable, runs `issue` (the argument checks and the NCCL calls)
  // on this communicator's GPU, then waits for the stream.
  template <class Issue>
  void call(std::string_view op, Issue&& issue) {
    state_->check_usable(op);
    const cuda::device_guard on(state_->device());
    issue();
    state_->wait(op);
  }

  void check(std::string_view op, std::string_view nccl_call, ncclResult_t result) {
    state_->check_call(result, op, nccl_call);
  }

  // Runs `body(issue)` between ncclGroupStart and ncclGroupEnd; `issue(name, result)` records the
  // first failing call, and the group is always closed before the failure is reported.
  template <class Body>
  void grouped(std::string_view op, Body&& body) {
    check(op, "ncclGroupStart", ncclGroupStart());
    std::string_view failed_call;
    ncclResult_t failure = ncclSuccess;
    auto issue = [&](std::string_view name, ncclResult_t result) {
      if (failure == ncclSuccess && result != ncclSuccess && result != ncclInProgress) {
        failed_call = name;
        failure = result;
      }
    };
    body(issue);
    const ncclResult_t ended = ncclGroupEnd();
    if (failure != ncclSuccess) check(op, failed_call, failure);
    check(op, "ncclGroupEnd", ended);
  }

  // Rejects host memory and memory of another GPU, which NCCL would read as device addresses.
  void check_device_memory(std::string_view op, std::string_view buffer, const void* data,
                           std::size_t bytes) const {
    if (bytes == 0) return;
    cudaPointerAttributes attributes{};
    const cudaError_t status = cudaPointerGetAttributes(&attributes, data);
    if (status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      fail(state_->where(op),
           cuda::detail::text(buffer, " is not memory CUDA knows: ", cudaGetErrorString(status)),
           "Pass device memory of this communicator's GPU, e.g. cuda::device_buffer::view<T>()");
    }
    const bool on_this_device = (attributes.type == cudaMemoryTypeDevice && attributes.device == device()) ||
                                attributes.type == cudaMemoryTypeManaged;
    if (on_this_device) return;
    if (attributes.type == cudaMemoryTypeDevice)
      fail(state_->where(op),
           cuda::detail::text(buffer, " is device memory of GPU ", attributes.device,
                              " but this rank runs on GPU ", device()),
           "Allocate each rank's buffers on its own GPU (cudaSetDevice(comm.device()) before allocating)");
    fail(state_->where(op),
         cuda::detail::text(buffer, " points to host memory, but the nccl communicator moves device memory"),
         "Copy the data to device memory first (cuda::device_buffer: upload, view<T>()), and back with "
         "download");
  }

  void check_size_times(std::string_view op, std::string_view large, std::size_t large_count,
                        std::string_view small, std::size_t small_count) const {
    const auto p = static_cast<std::size_t>(size());
    if (large_count != p * small_count)
      fail(state_->where(op),
           cuda::detail::text(large, " holds ", large_count, " elements but ", op, " needs size() * ", small,
                              ".size() = ", p, " * ", small_count, " = ", p * small_count),
           cuda::detail::text("Give ", large, " size() * ", small, ".size() elements"));
  }

  void check_all_to_all_sizes(std::size_t in_count, std::size_t out_count) const {
    if (out_count != in_count)
      fail(state_->where("all_to_all"),
           cuda::detail::text("out holds ", out_count, " elements but in holds ", in_count),
           "Give in and out the same size");
    if (in_count % static_cast<std::size_t>(size()) != 0)
      fail(state_->where("all_to_all"),
           cuda::detail::text("in holds ", in_count, " elements, which do not split into ", size(),
                              " equal chunks"),
           "Give in and out a multiple of size() elements");
  }

  // In and out must not overlap, except in the in-place forms: the smaller buffer is exactly chunk
  // `rank` of the larger one (`in_inside_out` says which is which; nullopt: no in-place form).
  template <class T>
  void check_no_overlap(std::string_view op, const T* in, std::size_t in_count, const T* out,
                        std::size_t out_count, std::optional<bool> in_inside_out) const {
    const std::less<const T*> before;
    const bool overlap =
        in_count > 0 && out_count > 0 && before(in, out + out_count) && before(out, in + in_count);
    if (!overlap) return;
    if (in_inside_out.has_value()) {
      const auto at = static_cast<std::size_t>(rank()) * (*in_inside_out ? in_count : out_count);
      if (*in_inside_out ? in == out + at : out == in + at) return;
    }
    fail(state_->where(op), "in and out overlap",
         !in_inside_out.has_value() ? "Pass separate buffers"
         : *in_inside_out ? "Pass separate buffers, or in = out.subspan(rank() * n, n) to gather in place"
                          : "Pass separate buffers, or out = in.subspan(rank() * n, n) to reduce in place");
  }

  void check_peer(std::string_view op, int peer, int tag) const {
    if (peer < 0 || peer >= size())
      fail(state_->where(op), cuda::detail::text("peer ", peer, " is not a rank of this group of ", size()),
           "Pass a peer in [0, size())");
    if (peer == rank())
      fail(state_->where(op), cuda::detail::text("rank ", rank(), " names itself as the peer"),
           "Pass another rank; copy the data on the device instead of sending it to the same rank");
    if (tag < 0) fail(state_->where(op), cuda::detail::text("tag ", tag, " is negative"), "Pass a tag >= 0");
  }

  std::shared_ptr<detail::comm_state> state_;
};

}  // namespace shardgraph::nccl
