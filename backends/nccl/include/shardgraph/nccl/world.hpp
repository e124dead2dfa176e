#pragma once
// world: the ranks of an NCCL world that live in this process, one GPU each.
//
//   auto world = shardgraph::nccl::world::single_process(shardgraph::cuda::device_count());
//   world.run([](shardgraph::nccl::communicator& comm) {      // on one thread per rank, on GPU rank
//     std::vector<float> host(1024, float(comm.rank()));
//     shardgraph::cuda::device_buffer x(host.size() * sizeof(float));
//     x.upload(host);
//     comm.all_reduce(x.view<float>());                         // device memory: communicator.hpp
//     x.download(host);                                          // host[i] == 0 + 1 + ... + (size - 1)
//   });
//
// single_process(ranks): every rank in this process, rank r on GPU r (like threads::world, with
// GPUs). from_unique_id(id, rank, size): one rank of a world spread over processes, on the GPU that
// is current when it is called; every process calls it with the same id (made by new_unique_id()
// on one of them and shipped to the others; nccl/bootstrap.hpp does it over TCP for launched runs).
//
// The NCCL communicators are made once, here, and serve every run(). run(fn) calls fn on one
// thread per local rank, each with that rank's GPU current, and joins them all. When fn throws on
// one rank, the other local ranks' pending or next calls abort and throw ("... aborted because
// rank 2 failed: <its message>"), and run() rethrows the first failing rank's own exception. A
// world whose run failed stays aborted: later runs throw; make a new world.
//
// The communicators are NCCL's non-blocking kind, made by the grouped ncclCommInitRankConfig loop
// that ncclCommInitAll runs inside, so that initialization, like every later call, ends at the
// timeout instead of blocking a thread for good (ncclCommInitAll itself makes blocking ones).
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/device.hpp>
#include <shardgraph/cuda/device_guard.hpp>
#include <shardgraph/cuda/text.hpp>
#include <shardgraph/nccl/check.hpp>
#include <shardgraph/nccl/comm_state.hpp>
#include <shardgraph/nccl/communicator.hpp>
#include <shardgraph/nccl/world_state.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace shardgraph::nccl {

class world {
 public:
  static constexpr std::chrono::milliseconds default_timeout = std::chrono::minutes(5);

  // Every rank in this process: rank r on GPU r, for r in [0, ranks). ranks <= device_count().
  static world single_process(int ranks, std::chrono::milliseconds timeout = default_timeout) {
    const std::string where = "nccl::world::single_process";
    check_timeout(where, timeout);
    if (ranks < 1)
      fail(where, cuda::detail::text("a world of ", ranks, " ranks cannot run anything"),
           "Pass at least 1 rank");
    const int devices = cuda::device_count();
    if (devices == 0)
      fail(where, "no CUDA device is visible",
           "Run on a machine with a GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES), or use threads::world");
    if (devices == 1 && ranks > 1)
      fail(where,
           cuda::detail::text("only 1 GPU is visible, and NCCL needs one GPU per rank, so ", ranks,
                              " ranks cannot run here"),
           "Pass 1 rank, run on a machine with more GPUs, or simulate the ranks with threads::world");
    if (ranks > devices)
      fail(where,
           cuda::detail::text(ranks, " ranks need ", ranks, " GPUs but only ", devices, " are visible"),
           cuda::detail::text("Pass at most ", devices, " ranks (NCCL needs one GPU per rank)"));

    const ncclUniqueId id = new_unique_id();
    const restore_device restore{current_device(where)};  // the loop below selects each GPU in turn
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(ranks), nullptr);
    ncclConfig_t config = detail::non_blocking_config();
    ncclResult_t failure = ncclSuccess;
    detail::check_nccl(ncclGroupStart(), where, "ncclGroupStart");
    for (int r = 0; r < ranks; ++r) {
      const cudaError_t selected = cudaSetDevice(r);
      if (selected != cudaSuccess) {
        static_cast<void>(ncclGroupEnd());
        abort_all(comms);
        cuda::check_cuda(selected, "nccl::world::single_process (cudaSetDevice)");
      }
      const ncclResult_t result = ncclCommInitRankConfig(&comms[r], ranks, id, r, &config);
      if (failure == ncclSuccess && result != ncclSuccess && result != ncclInProgress) failure = result;
    }
    const ncclResult_t ended = ncclGroupEnd();
    if (failure == ncclSuccess && ended != ncclSuccess && ended != ncclInProgress) failure = ended;
    if (failure != ncclSuccess) {
      const std::string why = detail::describe("ncclCommInitRankConfig", failure, nullptr);
      abort_all(comms);
      fail(where, why, detail::how_to_fix(failure));
    }
    std::vector<int> devices_of(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) devices_of[static_cast<std::size_t>(r)] = r;
    auto state = std::make_shared<detail::world_state>(ranks, /*all_local=*/true, timeout);
    return world(where, std::move(comms), std::move(devices_of), std::vector<int>(devices_of), ranks,
                 std::move(state));
  }

  // This process's rank of a world of `size` ranks spread over processes, on the current GPU.
  // Every rank calls it (at about the same time) with the same id.
  static world from_unique_id(const ncclUniqueId& id, int rank, int size,
                              std::chrono::milliseconds timeout = default_timeout) {
    const std::string where = "nccl::world::from_unique_id";
    check_timeout(where, timeout);
    if (size < 1)
      fail(where, cuda::detail::text("a world of ", size, " ranks cannot run anything"), "Pass size >= 1");
    if (rank < 0 || rank >= size)
      fail(where, cuda::detail::text("rank ", rank, " is not in [0, ", size, ")"),
           "Pass a rank in [0, size)");
    if (!cuda::has_device())
      fail(where, "no CUDA device is visible",
           "Run on a machine with a GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
    const int device = current_device(where);
    std::vector<ncclComm_t> comms(1, nullptr);
    ncclConfig_t config = detail::non_blocking_config();
    const ncclResult_t result = ncclCommInitRankConfig(&comms[0], size, id, rank, &config);
    if (result != ncclSuccess && result != ncclInProgress) {
      const std::string why = detail::describe("ncclCommInitRankConfig", result, nullptr);
      abort_all(comms);
      fail(where, why, detail::how_to_fix(result));
    }
    auto state = std::make_shared<detail::world_state>(1, /*all_local=*/size == 1, timeout);
    return world(where, std::move(comms), {device}, {rank}, size, std::move(state));
  }

  // A new id for from_unique_id: made once, by one process, and passed to every rank.
  static ncclUniqueId new_unique_id() {
    ncclUniqueId id{};
    detail::check_nccl(ncclGetUniqueId(&id), "nccl::world::new_unique_id", "ncclGetUniqueId");
    return id;
  }

  // Ranks in the whole world, and in this process.
  int size() const { return size_; }
  int local_size() const { return static_cast<int>(ranks_.size()); }

  template <class Fn>
  requires std::invocable<Fn&, communicator&>
  void run(Fn&& fn) const {
    if (state_->failed())
      fail("nccl::world::run", "this world was aborted after " + state_->failure_text(),
           "Fix the first failure, then make a new nccl::world");
    state_->begin_run();
    std::vector<std::exception_ptr> errors(ranks_.size());
    auto rank_body = [&](std::size_t local) {
      const auto& rank_state = ranks_[local];
      try {
        cuda::check_cuda(cudaSetDevice(rank_state->device()), "nccl::world::run (cudaSetDevice)");
        communicator comm(rank_state);
        std::invoke(fn, comm);
      } catch (...) {
        errors[local] = std::current_exception();
        state_->fail(rank_state->world_rank(), message_of(errors[local]));
      }
      state_->mark_returned();
    };
    std::vector<std::thread> threads;
    threads.reserve(ranks_.size());
    try {
      for (std::size_t local = 0; local < ranks_.size(); ++local) threads.emplace_back(rank_body, local);
    } catch (...) {  // a thread could not start: the running ranks must not wait for it
      state_->fail(ranks_[threads.size()]->world_rank(), message_of(std::current_exception()));
      for (std::size_t local = threads.size(); local < ranks_.size(); ++local) state_->mark_returned();
      for (auto& t : threads) t.join();
      throw;
    }
    for (auto& t : threads) t.join();
    rethrow_first(errors);
  }

 private:
  struct restore_device {
    int device;
    ~restore_device() { static_cast<void>(cudaSetDevice(device)); }
  };

  world(const std::string& where, std::vector<ncclComm_t> comms, std::vector<int> devices,
        std::vector<int> world_ranks, int size, std::shared_ptr<detail::world_state> state)
      : size_(size), state_(std::move(state)) {
    try {
      wait_until_initialized(where, comms, devices);
      for (std::size_t local = 0; local < comms.size(); ++local) {
        ranks_.push_back(std::make_shared<detail::comm_state>(comms[local], devices[local],
                                                              world_ranks[local],
                                                              /*is_world=*/true, state_));
        comms[local] = nullptr;  // owned by its comm_state now
      }
    } catch (...) {
      state_->fail(-1, "initialization failed");
      abort_all(comms);
      throw;
    }
  }

  // Polls every communicator until NCCL has finished making it, up to the timeout.
  void wait_until_initialized(const std::string& where, std::vector<ncclComm_t>& comms,
                              const std::vector<int>& devices) const {
    const auto deadline = std::chrono::steady_clock::now() + state_->timeout();
    for (std::size_t local = 0; local < comms.size(); ++local) {
      const cuda::device_guard on(devices[local]);
      for (int round = 0;; ++round) {
        ncclResult_t initialized = ncclSuccess;
        detail::check_nccl(ncclCommGetAsyncError(comms[local], &initialized), where, "ncclCommGetAsyncError",
                           comms[local]);
        if (initialized == ncclSuccess) break;
        if (initialized != ncclInProgress)
          fail(where, detail::describe("ncclCommInitRankConfig", initialized, comms[local]),
               detail::how_to_fix(initialized));
        if (std::chrono::steady_clock::now() > deadline)
          fail(where,
               cuda::detail::text("the NCCL communicator was not ready within ", state_->timeout().count(),
                                  " ms"),
               "Check that every rank calls from_unique_id with the same id and size, or pass a longer "
               "timeout");
        detail::pause_between_polls(round);
      }
    }
  }

  static void abort_all(std::vector<ncclComm_t>& comms) noexcept {
    for (auto& comm : comms) {
      if (comm != nullptr) static_cast<void>(ncclCommAbort(comm));
      comm = nullptr;
    }
  }

  static void check_timeout(const std::string& where, std::chrono::milliseconds timeout) {
    if (timeout <= std::chrono::milliseconds::zero())
      fail(where, cuda::detail::text("the timeout of ", timeout.count(), " ms is not positive"),
           "Pass a positive timeout (the default is 5 minutes)");
  }

  static int current_device(const std::string& where) {
    int device = 0;
    cuda::check_cuda(cudaGetDevice(&device), (where + " (cudaGetDevice)").c_str());
    return device;
  }

  static std::string message_of(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "an exception that is not a std::exception";
    }
  }

  // The exception of the rank that failed first, else of the lowest local rank that failed.
  void rethrow_first(const std::vector<std::exception_ptr>& errors) const {
    if (!state_->failed()) return;
    const int first = state_->first_failed_rank();
    for (std::size_t local = 0; local < ranks_.size(); ++local)
      if (ranks_[local]->world_rank() == first && errors[local]) std::rethrow_exception(errors[local]);
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    fail("nccl::world::run", "aborted after " + state_->failure_text(), "Fix the first failure");
  }

  int size_;
  std::shared_ptr<detail::world_state> state_;
  std::vector<std::shared_ptr<detail::comm_state>> ranks_;  // (local ranks)
};

}  // namespace shardgraph::nccl
