#pragma once
// backend_state: what one cuda::backend holds on its device (the stream, cuBLASLt's plans, scratch,
// the flags its kernels raise, the statistics kept for backward calls, the profile's timers); copies
// of a backend share it. op_timer times an op in profile mode; launched() reports a failed launch.
#include <shardgraph/core/dtype.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/backend_options.hpp>
#include <shardgraph/cuda/check.hpp>
#if SHARDGRAPH_CUDA_CUDNN
#include <shardgraph/cuda/cudnn_attention.hpp>
#endif
#include <shardgraph/cuda/device_buffer.hpp>
#include <shardgraph/cuda/gemm.hpp>
#include <shardgraph/cuda/kernels/elementwise.cuh>
#include <shardgraph/cuda/pinned_staging.hpp>
#include <shardgraph/cuda/scratch.hpp>
#include <shardgraph/cuda/tensor_buffer.hpp>
#include <shardgraph/cuda/text.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace shardgraph::cuda::detail {

// The stream, cuBLASLt, scratch and device-side flags of one backend; copies of a backend share it.
struct backend_state {
  int device = 0;
  cudaStream_t stream = nullptr;
  gemm_runner gemm;
  scratch_space scratch;
  std::shared_ptr<memory_ledger> ledger = std::make_shared<memory_ledger>();
  device_buffer flags{sizeof(int) * 2 + sizeof(double)};  // bad target, non-finite, a sum
  bool profile = false;
  cudaEvent_t start = nullptr, end = nullptr;  // profile mode
  std::map<std::string, op_time> times;
  std::vector<kernels::adamw_task> adamw_tasks;  // adamw_many's tables, kept to reuse their memory
  std::vector<kernels::adamw_chunk> adamw_chunks;
  // A token-major attention call run apart: its operands' copies.
  tensor_buffer head_major;
  pinned_staging staging;  // uploads
#if SHARDGRAPH_CUDA_CUDNN
  std::unique_ptr<cuda::cudnn_attention> cudnn;  // made at its first use; null: not chosen
#endif
  // Counts every allocation and release of the memory above (and the scratch's): a recording made
  // at another count may read memory that has moved.
  std::uint64_t moves = 0;
  std::uint64_t memory_generation() const { return moves + scratch.generation(); }
  int multiprocessors = 1;  // the device's SMs
  // resident blocks an SM, by kernel, dynamic shared memory and threads a block
  std::map<std::tuple<const void*, std::size_t, unsigned>, int> blocks_per_sm;
  std::size_t shared_per_block = 48 * 1024;  // the most shared memory a block may ask for (opt-in)
  backend_state(int d, bool profiling, gemm_choice choice) : device(d), gemm(choice), profile(profiling) {
    check_cuda(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, d),
               "backend (cudaDeviceGetAttribute)");
    int optin = 0;
    check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d),
               "backend (cudaDeviceGetAttribute)");
    shared_per_block = static_cast<std::size_t>(optin);
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
               "backend (cudaStreamCreateWithFlags)");
    check_cuda(cudaMemset(flags.data(), 0, flags.size_bytes()), "backend (cudaMemset)");
    if (profile) {
      check_cuda(cudaEventCreate(&start), "backend (cudaEventCreate)");
      check_cuda(cudaEventCreate(&end), "backend (cudaEventCreate)");
    }
  }
  ~backend_state() {
    if (start != nullptr) static_cast<void>(cudaEventDestroy(start));
    if (end != nullptr) static_cast<void>(cudaEventDestroy(end));
    if (stream != nullptr) static_cast<void>(cudaStreamDestroy(stream));
  }
  backend_state(const backend_state&) = delete;
  backend_state& operator=(const backend_state&) = delete;
  int* bad_target() { return static_cast<int*>(flags.data()); }
  int* nonfinite() { return static_cast<int*>(flags.data()) + 1; }
  double* sum() { return reinterpret_cast<double*>(static_cast<char*>(flags.data()) + 8); }
};

// Profile mode: the GPU time of what runs on the stream between construction and destruction,
// added to the op's entry (the stream is waited for, so timings do not overlap).
class op_timer {
 public:
  op_timer(backend_state& s, std::string_view name, dtype type) : state_(s.profile ? &s : nullptr) {
    if (state_ == nullptr) return;
    name_ = text(name, " ", dtype_name(type));
    check_cuda(cudaEventRecord(state_->start, state_->stream), "backend profile (cudaEventRecord)");
  }
  ~op_timer() {
    if (state_ == nullptr) return;
    float ms = 0;
    if (cudaEventRecord(state_->end, state_->stream) != cudaSuccess ||
        cudaEventSynchronize(state_->end) != cudaSuccess ||
        cudaEventElapsedTime(&ms, state_->start, state_->end) != cudaSuccess)
      return;  // a failed op reports itself; its time is not kept
    op_time& t = state_->times[name_];
    t.name = name_;
    ++t.calls;
    t.ms += ms;
  }
  op_timer(const op_timer&) = delete;
  op_timer& operator=(const op_timer&) = delete;

 private:
  backend_state* state_;
  std::string name_;
};

// Reports the launch error of the last kernel, if any, naming `what` launched it.
inline void launched(std::string_view what) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    fail(text("cuda::backend: ", what), text(cudaGetErrorString(status), " (", cudaGetErrorName(status), ")"),
         how_to_fix(status));
}

}  // namespace shardgraph::cuda::detail
