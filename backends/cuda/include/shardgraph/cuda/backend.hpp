#pragma once
// shardgraph::cuda::backend: the ComputeBackend (and TrainingBackend) on one NVIDIA GPU. The
// executor's kernel calls run on the backend's stream: GEMMs through cuBLASLt (gemm.hpp), 16-bit
// causal attention on cuDNN's fused flash attention where the build has cuDNN and the shape suits
// it (cudnn_attention.hpp), else with head_dim 64 on the own flash attention kernels
// (kernels/flash_attention.cuh), other attention as batched GEMMs around a causal softmax, and the
// rest as the kernels of kernels/. It computes what the cpu backend computes (the reference) in
// f64, f32, bf16 and f16: 16-bit values are read into f32, computed in f32 and rounded once; an f64
// call computes in f64. Exceptions, in 16-bit attention: flash attention (cuDNN's and the own)
// rounds P and dS to the inputs' dtype before their products (as FlashAttention does); the
// batched-GEMM path rounds its scores, probabilities and their gradients between its products (as
// PyTorch's unfused attention under autocast does).
//
//   world.run([&](auto& comm) {
//     auto rank = sg::bind(program, sizes, comm, sg::cuda::backend{}, mesh, weights);   // in a .cu file
//   });
//
// Include it from a file compiled by nvcc (its kernels are in the headers). Buffers are device
// memory; backend{{.host_visible = true}} makes them managed memory, for host-side communicators
// (threads: several ranks on one GPU). Work is asynchronous on the stream; the executor calls
// synchronize() before each collective, and download, sum_of_squares and all_finite wait for it.
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/check.hpp>
#if SHARDGRAPH_CUDA_CUDNN
#include <shardgraph/cuda/cudnn_attention.hpp>
#endif
#include <shardgraph/cuda/device_guard.hpp>
#include <shardgraph/cuda/gemm.hpp>
#include <shardgraph/cuda/kernels/elementwise.cuh>
#include <shardgraph/cuda/kernels/embedding.cuh>
#include <shardgraph/cuda/kernels/flash_attention.cuh>
#include <shardgraph/cuda/kernels/layout.cuh>
#include <shardgraph/cuda/kernels/norms.cuh>
#include <shardgraph/cuda/kernels/norms_by_warp.cuh>
#include <shardgraph/cuda/kernels/softmax.cuh>
#include <shardgraph/cuda/kernels/vectorized.cuh>
#include <shardgraph/cuda/pinned_staging.hpp>
#include <shardgraph/cuda/scratch.hpp>
#include <shardgraph/cuda/stream_recording.hpp>
#include <shardgraph/cuda/tensor_buffer.hpp>
#include <shardgraph/cuda/text.hpp>
#include <shardgraph/ir/op.hpp>
#include <shardgraph/optim/adamw.hpp>

#include <cuda_runtime.h>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

namespace shardgraph::cuda {

struct backend_options {
  bool host_visible = false;  // managed memory, for host-side communicators
  int device = -1;            // -1: the current device
  bool profile = false;       // time every op on the GPU (also: SHARDGRAPH_CUDA_PROFILE=1); see profile()
  // The executor records a run of its program as one CUDA graph and replays it (runtime/
  // step_recording.hpp); false (or SHARDGRAPH_CUDA_GRAPHS=0) runs every op by its own launch.
  bool graphs = true;
  // Causal 16-bit attention on cuDNN's fused flash attention where it applies (built with cuDNN:
  // SHARDGRAPH_CUDA_CUDNN) rather than shardgraph's own kernels; false (or
  // SHARDGRAPH_CUDA_ATTENTION=flash) keeps the own kernels everywhere.
  bool cudnn_attention = true;
  // A GEMM plan's algorithm: the fastest of cuBLASLt's first answers, timed at its first call
  // (gemm.hpp); heuristic (or SHARDGRAPH_CUDA_GEMM_CHOICE=heuristic) takes the first answer, the
  // same in every run, for bitwise-repeatable runs.
  gemm_choice gemm = gemm_choice::timed;
  // A linear's bias gradient (dy's column sums) in its weight product's epilogue (cuBLASLt's
  // BGRADA/B), or (false, the default) by the column-sum kernels after the product alone: the
  // epilogue slows the weight products by more than reading dy again costs (bench/RESULTS.md).
  // SHARDGRAPH_CUDA_BIAS_GRAD=product|apart overrides it.
  bool bias_grad_in_product = false;
};

// GPU time per op (profile mode): calls and total milliseconds, by op name and output dtype.
struct op_time {
  std::string name;
  std::int64_t calls = 0;
  double ms = 0;
};

namespace detail {

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
  // Attention's dq, dk, dv in scratch, valid for these q, k, v, dout until anything else is written.
  bool attention_cache_valid = false;
  const void* attention_inputs[4]{};
  bool attention_dq_cached = false;  // false: the last backward wrote dq straight into its call's output
  // A token-major attention call run apart: its operands' copies.
  tensor_buffer head_major;
  // Rows' log-sum-exp kept for a backward (kernel_call::output_kept), by address: of flash
  // attention's outputs ((batch, heads, seq) f32) and of cross-entropy's logits (rows, in C).
  std::map<const void*, device_buffer> kept_lse;
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

inline bool profile_requested(bool option) {
  const char* v = std::getenv("SHARDGRAPH_CUDA_PROFILE");
  return option || (v != nullptr && std::string_view(v) != "" && std::string_view(v) != "0");
}
inline bool cudnn_attention_chosen(bool option) {
  const char* v = std::getenv("SHARDGRAPH_CUDA_ATTENTION");
  if (v != nullptr && std::string_view(v) != "" && std::string_view(v) != "flash" &&
      std::string_view(v) != "cudnn")
    fail("cuda::backend", text("SHARDGRAPH_CUDA_ATTENTION is \"", v, "\""),
         "set it to cudnn (cuDNN's fused attention where it applies) or flash (shardgraph's kernels)");
  if (v != nullptr && std::string_view(v) != "") return std::string_view(v) == "cudnn";
  return option;
}
inline gemm_choice gemm_choice_chosen(gemm_choice option) {
  const char* v = std::getenv("SHARDGRAPH_CUDA_GEMM_CHOICE");
  if (v == nullptr || std::string_view(v) == "") return option;
  if (std::string_view(v) == "timed") return gemm_choice::timed;
  if (std::string_view(v) == "heuristic") return gemm_choice::heuristic;
  fail("cuda::backend", text("SHARDGRAPH_CUDA_GEMM_CHOICE is \"", v, "\""),
       "set it to timed (the fastest of cuBLASLt's first answers) or heuristic (its first answer)");
}
inline bool bias_grad_in_product_chosen(bool option) {
  const char* v = std::getenv("SHARDGRAPH_CUDA_BIAS_GRAD");
  if (v == nullptr || std::string_view(v) == "") return option;
  if (std::string_view(v) == "product" || std::string_view(v) == "apart")
    return std::string_view(v) == "product";
  fail("cuda::backend", text("SHARDGRAPH_CUDA_BIAS_GRAD is \"", v, "\""),
       "set it to product (in the weight product's epilogue) or apart (column sums after it)");
}
inline bool graphs_allowed(bool option) {
  const char* v = std::getenv("SHARDGRAPH_CUDA_GRAPHS");
  return option && (v == nullptr || std::string_view(v) != "0");
}

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

inline int current_device(int requested) {
  if (requested >= 0) {
    check_cuda(cudaSetDevice(requested), "backend (cudaSetDevice)");
    return requested;
  }
  int d = 0;
  check_cuda(cudaGetDevice(&d), "backend (cudaGetDevice)");
  return d;
}

}  // namespace detail

class backend {
 public:
  using buffer = tensor_buffer;
  static constexpr bool linear_bias_epilogue = true;  // kernel_call::bias of a linear: the GEMM adds it
  // kernel_call::bias_grad of a linear_weight_grad: the GEMM sums dy's columns in its epilogue
  static constexpr bool linear_bias_grad_epilogue = true;
  // kernel_call::bias_grad of a layer_norm_grad_w: its column sums take dy's in the same pass
  static constexpr bool norm_bias_grad_fused = true;
  // kernel_call::key_grad and value_grad of an attention_grad_q: one backward writes dq, dk and dv
  static constexpr bool attention_gradients_together = true;
  // kernel_call::epilogue of a linear (GELU keeping its input, GELU's gradient, a residual add): in
  // the GEMM's epilogue where cuBLASLt has one, else by the elementwise kernel after it
  static constexpr bool linear_epilogues = true;
  // kernel_call::epilogue add of a norm's input gradient: the warp-per-row kernel adds it as it writes
  static constexpr bool norm_grad_add_epilogue = true;
  // kernel_call::epilogue add of an embedding_grad (a tied table's gradient sum): the row kernel
  // adds the other gradient's row as it writes each row, rounded as the add apart would round it
  static constexpr bool embedding_grad_add_epilogue = true;
  // kernel_call::token_major of attention and its gradients: flash attention reads and writes the
  // products' (batch, seq, heads, head_dim) rows in place; other attention runs on permuted copies
  static constexpr bool attention_token_major = true;
  // kernel_call::output_kept / side of attention: the backward reads the forward's output and its
  // log-sum-exp instead of running the forward again
  static constexpr bool attention_output_reuse = true;
  // kernel_call::output_kept / side of cross_entropy: its gradient reads the rows' log-sum-exp the
  // loss kept, one pass over the logits instead of two
  static constexpr bool cross_entropy_statistics_kept = true;
  // kernel_call::weight_grad (and bias_grad) of a norm's input gradient: one pass over x and dy
  // writes the three where the rows fit the warp kernels, else the calls run apart
  static constexpr bool norm_gradients_together = true;
  // kernel_call::logits_grad of cross_entropy: one kernel reads each row of logits once for the loss
  // and writes its gradient (in place where the memory plan puts it in the logits' memory)
  static constexpr bool cross_entropy_gradient_with_loss = true;
  // kernel_call::batch of linear and linear_weight_grad: q's, k's and v's products as one strided
  // batched GEMM (x shared), which fills the GPU better than three small ones. address() lets the
  // executor find the strides between the products' operands.
  static constexpr bool products_batched = true;
  static const void* address(const buffer& b) { return b.data(); }

  explicit backend(backend_options options = {})
      : options_(options),
        state_(std::make_shared<detail::backend_state>(detail::current_device(options.device),
                                                       detail::profile_requested(options.profile),
                                                       detail::gemm_choice_chosen(options.gemm))) {
    options_.graphs = detail::graphs_allowed(options_.graphs);
    options_.bias_grad_in_product = detail::bias_grad_in_product_chosen(options_.bias_grad_in_product);
    options_.cudnn_attention = detail::cudnn_attention_chosen(options_.cudnn_attention);
#if SHARDGRAPH_CUDA_CUDNN
    if (options_.cudnn_attention && state_->cudnn == nullptr)
      state_->cudnn = std::make_unique<cuda::cudnn_attention>();
#endif
  }

  // Recording (runtime/step_recording.hpp): the stream's work between begin_recording() and
  // end_recording() becomes one CUDA graph, which replay() launches. Not in profile mode (each op is
  // timed on its own) nor with managed memory (host-side communicators read it between ops).
  struct recording {
    stream_recording graph;
    std::uint64_t memory_generation = 0;  // the backend's scratch as the graph saw it
  };
  bool records() const { return options_.graphs && !state_->profile && !options_.host_visible; }
  void begin_recording() { stream_recording::begin(stream()); }
  // Nothing when a call could not be recorded; recording_failure() says why.
  std::optional<recording> end_recording() {
    std::optional<stream_recording> graph = stream_recording::end(stream());
    if (!graph) return std::nullopt;
    return recording{std::move(*graph), state_->memory_generation()};
  }
  std::string recording_failure() const { return stream_recording::why_not(); }
  // Runs the recorded work again; false (and nothing run) when scratch memory it used has been
  // allocated anew since: the caller runs the work itself and records it again.
  bool replay(const recording& r) {
    if (r.memory_generation != state_->memory_generation()) return false;
    state_->attention_cache_valid = false;
    r.graph.replay(stream());
    return true;
  }

  // Profile mode: GPU time per op so far, largest first; reset_profile() starts again.
  std::vector<op_time> profile() const {
    std::vector<op_time> all;
    for (const auto& [name, t] : state_->times) all.push_back(t);
    std::sort(all.begin(), all.end(), [](const op_time& a, const op_time& b) { return a.ms > b.ms; });
    return all;
  }
  void reset_profile() { state_->times.clear(); }
  bool profiling() const { return state_->profile; }
  // The GEMM plans' timed choices so far (gemm_runner::choices).
  const gemm_choice_report& gemm_choices() const { return state_->gemm.choices(); }

  // Memory
  buffer allocate(dtype t, std::int64_t numel) {
    return buffer(t, numel, options_.host_visible, state_->ledger);
  }
  // What bind may still allocate: the device's free memory (cudaMemGetInfo). No limit for managed
  // memory (host_visible), which may exceed the device's, or where it cannot be read (the
  // allocation then reports the CUDA error).
  std::size_t free_bytes() const {
    std::size_t free = 0, total = 0;
    if (options_.host_visible || cudaMemGetInfo(&free, &total) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return std::numeric_limits<std::size_t>::max();
    }
    return free;
  }
  // numel elements in arena's memory from byte offset on, not owned (the executor's memory plan).
  buffer view(buffer& arena, std::size_t offset, dtype t, std::int64_t numel) {
    return buffer::view_of(arena, offset, t, numel);
  }
  // Returns once `host` may be reused: the bytes are staged in pinned memory and the device copy
  // runs on, in stream order (pinned_staging.hpp).
  void upload(buffer& b, const void* host) {
    state_->attention_cache_valid = false;
    if (b.numel() == 0) return;
    state_->staging.copy(b.data(), host, b.size_bytes(), stream());
    if (options_.host_visible) synchronize();  // the host may read the buffer next (threads communicator)
  }
  void download(const buffer& b, void* host) {
    if (b.numel() == 0) return synchronize();
    check_cuda(cudaMemcpyAsync(host, b.data(), b.size_bytes(), cudaMemcpyDeviceToHost, stream()),
               "backend::download (cudaMemcpyAsync)");
    synchronize();
  }
  void copy(const buffer& from, buffer& to) {
    if (from.size_bytes() != to.size_bytes())
      fail("cuda::backend::copy", detail::text(from.size_bytes(), " bytes into ", to.size_bytes()),
           "this is a bug in the executor; please report it");
    state_->attention_cache_valid = false;
    if (from.numel() == 0 || from.data() == to.data()) return;
    const detail::op_timer timer(*state_, "copy", to.type());
    check_cuda(cudaMemcpyAsync(to.data(), from.data(), from.size_bytes(), cudaMemcpyDeviceToDevice, stream()),
               "backend::copy (cudaMemcpyAsync)");
  }
  // The memory a communicator writes: the attention gradients kept for the next call may be stale.
  void* data(buffer& b) {
    state_->attention_cache_valid = false;
    return b.data();
  }

  // Waits for the stream, then reports what its kernels found (a target outside the vocabulary).
  void synchronize() {
    check_cuda(cudaStreamSynchronize(stream()), "backend: a kernel failed (cudaStreamSynchronize)");
    int bad = 0;
    check_cuda(cudaMemcpy(&bad, state_->bad_target(), sizeof bad, cudaMemcpyDeviceToHost), "backend (flags)");
    if (bad != 0) {
      check_cuda(cudaMemset(state_->bad_target(), 0, sizeof bad), "backend (flags)");
      fail("cuda::backend: cross_entropy", "a target id is outside the vocabulary",
           "check the token ids against the model's vocab_size, or mark ignored rows with the ignore index");
    }
  }

  cudaStream_t stream() const { return state_->stream; }
  int device() const { return state_->device; }
  // Bytes held by the values this backend allocated (now, and at most), and by its scratch.
  std::size_t bytes_in_use() const { return state_->ledger->in_use; }
  std::size_t peak_bytes() const { return state_->ledger->peak; }
  std::size_t scratch_bytes() const { return state_->scratch.bytes(); }

  // Block moves: (outer, parts*mid, inner) <-> [parts][outer][mid][inner]
  void deinterleave(const buffer& from, buffer& to, compute::block_layout l) {
    move_blocks(from, to, l, false);
  }
  void interleave(const buffer& from, buffer& to, compute::block_layout l) { move_blocks(from, to, l, true); }
  void slice(const buffer& from, buffer& to, compute::block_layout l, std::int64_t index) {
    state_->attention_cache_valid = false;
    const std::size_t row = static_cast<std::size_t>(l.mid * l.inner * l.element_bytes);
    if (row == 0 || l.outer == 0) return;
    check_cuda(
        cudaMemcpy2DAsync(to.data(), row, static_cast<const char*>(from.data()) + index * row, l.parts * row,
                          row, static_cast<std::size_t>(l.outer), cudaMemcpyDeviceToDevice, stream()),
        "backend::slice (cudaMemcpy2DAsync)");
  }

  // The optimizer's work (compute::TrainingBackend).
  double sum_of_squares(const buffer& b) {
    const buffer* one = &b;
    return sum_of_squares(std::span<const buffer* const>(&one, 1));
  }
  // The sum over several buffers with one wait for the GPU (the trainer's gradient norm).
  double sum_of_squares(std::span<const buffer* const> buffers) {
    double sum = 0;
    check_cuda(cudaMemsetAsync(state_->sum(), 0, sizeof(double), stream()), "backend::sum_of_squares");
    for (const buffer* b : buffers) {
      if (b->numel() == 0) continue;
      kernels::sum_of_squares_kernel<double>
          <<<std::min(kernels::blocks_for(b->numel()), 1024u), 256, 0, stream()>>>(in(*b), b->numel(),
                                                                                   state_->sum());
      launched("sum_of_squares");
    }
    check_cuda(cudaMemcpyAsync(&sum, state_->sum(), sizeof sum, cudaMemcpyDeviceToHost, stream()),
               "backend::sum_of_squares");
    synchronize();
    return sum;
  }
  void scale(buffer& b, double factor) { axpby(b, b, 0, factor, "scale"); }
  void add_scaled(const buffer& from, buffer& to, double factor) {
    if (from.numel() != to.numel())
      fail("cuda::backend::add_scaled", "buffers of different size",
           "this is a bug in the trainer; please report it");
    axpby(from, to, 1, factor, "add_scaled");
  }
  void convert(const buffer& from, buffer& to) {
    if (from.numel() != to.numel())
      fail("cuda::backend::convert", "buffers of different size",
           "this is a bug in the trainer; please report it");
    if (from.type() == to.type()) return copy(from, to);
    axpby(from, to, 0, 1, "convert");
  }
  void fill_zero(buffer& b) {
    state_->attention_cache_valid = false;
    if (b.numel() == 0) return;
    check_cuda(cudaMemsetAsync(b.data(), 0, b.size_bytes(), stream()),
               "backend::fill_zero (cudaMemsetAsync)");
  }
  bool all_finite(const buffer& b) {
    int bad = 0;
    if (b.numel() == 0) return true;
    check_cuda(cudaMemsetAsync(state_->nonfinite(), 0, sizeof(int), stream()), "backend::all_finite");
    kernels::nonfinite_kernel<<<kernels::blocks_for(b.numel()), 256, 0, stream()>>>(in(b), b.numel(),
                                                                                    state_->nonfinite());
    launched("all_finite");
    check_cuda(cudaMemcpyAsync(&bad, state_->nonfinite(), sizeof bad, cudaMemcpyDeviceToHost, stream()),
               "backend::all_finite");
    synchronize();
    return bad == 0;
  }
  void copy_range(const buffer& from, std::int64_t from_offset, buffer& to, std::int64_t to_offset,
                  std::int64_t count) {
    if (from.type() != to.type() || from_offset < 0 || to_offset < 0 || count < 0 ||
        from_offset + count > from.numel() || to_offset + count > to.numel())
      fail("cuda::backend::copy_range", "the range leaves a buffer or the dtypes differ",
           "this is a bug in the trainer; please report it");
    state_->attention_cache_valid = false;
    if (count == 0) return;
    const std::size_t e = dtype_size(from.type());
    check_cuda(cudaMemcpyAsync(static_cast<char*>(to.data()) + to_offset * e,
                               static_cast<const char*>(from.data()) + from_offset * e, count * e,
                               cudaMemcpyDeviceToDevice, stream()),
               "backend::copy_range (cudaMemcpyAsync)");
  }
  // The per-step constants of AdamW, after checking the buffers agree.
  // grad may be of another floating dtype when `grad_any_dtype` (adamw_many widens it as it reads).
  static kernels::adamw_scalars adamw_scalars_for(const buffer& param, const buffer& grad, const buffer& m,
                                                  const buffer& v, const compute::adamw_arguments& a,
                                                  bool grad_any_dtype = false) {
    for (const buffer* b : std::initializer_list<const buffer*>{&grad, &m, &v})
      if ((b->type() != param.type() && !(b == &grad && grad_any_dtype && is_floating(grad.type()))) ||
          b->numel() != param.numel())
        fail("cuda::backend::adamw", "buffers of different dtype or size",
             "this is a bug in the trainer; please report it");
    const adamw_config config{
        .lr = a.lr, .beta1 = a.beta1, .beta2 = a.beta2, .eps = a.eps, .weight_decay = a.weight_decay};
    const auto c = shardgraph::detail::adamw_coefficients_for("cuda::backend::adamw", config, a.step, a.lr,
                                                              a.weight_decay > 0);
    return {c.beta1, c.beta2, c.eps, c.decay_factor, c.step_size, c.bias_correction2_sqrt};
  }

  // Every update in one launch (compute::adamw_update): the trainer's step without ZeRO.
  void adamw_many(std::span<const compute::adamw_update<buffer>> updates) {
    state_->attention_cache_valid = false;
    std::vector<kernels::adamw_task>& tasks = state_->adamw_tasks;
    std::vector<kernels::adamw_chunk>& chunks = state_->adamw_chunks;
    tasks.clear();
    chunks.clear();
    for (const compute::adamw_update<buffer>& u : updates) {
      const kernels::adamw_scalars s = adamw_scalars_for(*u.param, *u.grad, *u.m, *u.v, u.arguments, true);
      if (u.param->type() != dtype::f32 && u.param->type() != dtype::f64)
        fail("cuda::backend::adamw",
             detail::text("the optimizer works on f32 and f64 values, not ", dtype_name(u.param->type())),
             "train 16-bit models with f32 master weights (the trainer does so by default)");
      if (u.rounded != nullptr && u.rounded->numel() != u.param->numel())
        fail("cuda::backend::adamw_many", "the rounded copy differs in size from the parameter",
             "this is a bug in the trainer; please report it");
      const std::int64_t n = u.param->numel();
      if (n == 0) continue;
      tasks.push_back({.param = out(*u.param),
                       .m = out(*u.m),
                       .v = out(*u.v),
                       .rounded = u.rounded != nullptr ? out(*u.rounded) : kernels::mut_ref{},
                       .grad = in(*u.grad),
                       .numel = n,
                       .scalars = s,
                       .grad_factor = u.grad_factor});
      for (std::int64_t first = 0; first < n; first += kernels::adamw_chunk_elements)
        chunks.push_back({.task = static_cast<int>(tasks.size() - 1), .first = first});
    }
    if (chunks.empty()) return;
    const std::size_t task_bytes = tasks.size() * sizeof(kernels::adamw_task);
    void* table = state_->scratch.get(scratch_use::optimizer_tasks,
                                      task_bytes + chunks.size() * sizeof(kernels::adamw_chunk));
    auto* device_chunks = reinterpret_cast<kernels::adamw_chunk*>(static_cast<char*>(table) + task_bytes);
    // From pageable memory: the copies are staged before they return, so the vectors may change after.
    check_cuda(cudaMemcpyAsync(table, tasks.data(), task_bytes, cudaMemcpyHostToDevice, stream()),
               "backend::adamw_many (cudaMemcpyAsync)");
    check_cuda(cudaMemcpyAsync(device_chunks, chunks.data(), chunks.size() * sizeof(kernels::adamw_chunk),
                               cudaMemcpyHostToDevice, stream()),
               "backend::adamw_many (cudaMemcpyAsync)");
    const detail::op_timer timer(*state_, "adamw_many", updates.front().param->type());
    kernels::adamw_many_kernel<<<static_cast<unsigned>(chunks.size()), 256, 0, stream()>>>(
        static_cast<const kernels::adamw_task*>(table), device_chunks);
    launched("adamw_many");
  }

  void adamw(buffer& param, const buffer& grad, buffer& m, buffer& v, const compute::adamw_arguments& a) {
    const kernels::adamw_scalars s = adamw_scalars_for(param, grad, m, v, a);
    state_->attention_cache_valid = false;
    if (param.numel() == 0) return;
    const detail::op_timer timer(*state_, "adamw", param.type());
    const unsigned blocks = kernels::blocks_for(param.numel());
    if (param.type() == dtype::f32)
      kernels::adamw_kernel<float><<<blocks, 256, 0, stream()>>>(
          static_cast<float*>(param.data()), static_cast<const float*>(grad.data()),
          static_cast<float*>(m.data()), static_cast<float*>(v.data()), param.numel(), s);
    else if (param.type() == dtype::f64)
      kernels::adamw_kernel<double><<<blocks, 256, 0, stream()>>>(
          static_cast<double*>(param.data()), static_cast<const double*>(grad.data()),
          static_cast<double*>(m.data()), static_cast<double*>(v.data()), param.numel(), s);
    else
      fail("cuda::backend::adamw",
           detail::text("the optimizer works on f32 and f64 values, not ", dtype_name(param.type())),
           "train 16-bit models with f32 master weights (the trainer does so by default)");
    launched("adamw");
  }

  // One kernel (or GEMM) per call, as the executor describes it (compute/compute_backend.hpp).
  void run(const compute::kernel_call<buffer>& call) {
    if (call.batch > 1 && !batch_fits(call)) return run_batch_apart(call);
    const bool attention_gradient = call.kind == op::attention_grad_q || call.kind == op::attention_grad_k ||
                                    call.kind == op::attention_grad_v;
    if (!attention_gradient) state_->attention_cache_valid = false;
    if (call.token_major && !cudnn_applies(call, attention_of(call)) &&
        !flash_applies(call, attention_of(call))) {
      if (call.key_grad == nullptr) return run_token_major_apart(call);
      // dk and dv with dq only where the backward writes them in place, not on head-major copies
      for (const call_t& apart : compute::split_attention_gradients(call)) run(apart);
      return;
    }
    if (call.weight_grad != nullptr && !norm_gradients_fit(call)) {
      const auto apart = compute::split_norm_gradients(call);
      run(apart.input_grad);
      return run(apart.weight_grad);
    }
    if (call.bias_grad != nullptr && call.weight_grad == nullptr && !bias_grad_epilogue_fits(call)) {
      const auto apart = compute::split_bias_grad(call);
      run(apart.product);
      return run(apart.bias_grad);
    }
    const detail::op_timer timer(*state_, op_name(call.kind), call.out->type());
    // 32-bit indices where every buffer of the call has fewer than 2^31 elements.
    if (uses_f64(call))
      large(call) ? run_typed<double, std::int64_t>(call) : run_typed<double, std::uint32_t>(call);
    else
      large(call) ? run_typed<float, std::int64_t>(call) : run_typed<float, std::uint32_t>(call);
    launched(op_name(call.kind));
  }

 private:
  using call_t = compute::kernel_call<buffer>;

  static kernels::ref in(const buffer& b) { return {b.data(), b.type()}; }
  static kernels::mut_ref out(buffer& b) { return {b.data(), b.type()}; }
  static kernels::ref in(const call_t& c, int k) { return in(*c.in[k]); }

  void launched(std::string_view what) {
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess)
      fail(detail::text("cuda::backend: ", what),
           detail::text(cudaGetErrorString(status), " (", cudaGetErrorName(status), ")"), how_to_fix(status));
  }

  // A norm's input gradient with its weight (and bias) gradient that norm_gradients takes in one
  // pass: every buffer of one floating dtype, on 16 bytes, rows of whole vectors, at most
  // gradient_vectors_per_lane a lane.
  static bool norm_gradients_fit(const call_t& c) {
    const dtype t = c.out->type();
    if (c.dims[0] == 0 || c.dims[1] == 0 ||
        c.dims[1] / vector_lanes(t) > kernels::gradient_vectors_per_lane * 32)
      return false;
    const buffer* addend = c.epilogue == compute::product_epilogue::add ? c.side : c.out;
    const buffer* bias = c.bias_grad != nullptr ? c.bias_grad : c.out;
    return vector_ready(
        t, c.dims[1], {in(c, 0), in(c, 1), in(c, 2), in(*c.out), in(*addend), in(*c.weight_grad), in(*bias)});
  }

  // A batched product (kernel_call::batch) that one cuBLASLt call runs: 16-bit or f32, no empty
  // dimension, the bias in the epilogue (a linear's, with no other epilogue) or the bias gradient in
  // the same dtype as the product.
  static bool batch_fits(const call_t& c) {
    if (c.out->type() == dtype::f64 || c.dims[0] == 0 || c.dims[1] == 0 || c.dims[2] == 0) return false;
    if (c.kind == op::linear) return c.epilogue == compute::product_epilogue::none;
    return c.kind == op::linear_weight_grad &&
           (c.bias_grad == nullptr || c.bias_grad->type() == c.out->type());
  }
  // A batched call's products one at a time.
  void run_batch_apart(const call_t& c) {
    std::array<buffer, 3> views;
    for (std::int64_t b = 0; b < c.batch; ++b) run(compute::batch_member(c, b, views));
  }

  // A weight gradient with its bias gradient that run_typed takes in one call: a product's or a
  // layer norm's, with no empty dimension.
  static bool bias_grad_epilogue_fits(const call_t& c) {
    if (c.out->numel() == 0 || c.bias_grad->numel() == 0 || c.dims[0] == 0 || c.dims[1] == 0) return false;
    if (c.kind == op::layer_norm_grad_w) return c.bias_grad->type() == c.out->type();
    return c.kind == op::linear_weight_grad && c.dims[2] > 0;
  }

  static bool large(const call_t& c) {
    constexpr std::int64_t limit = std::int64_t{1} << 31;
    if (c.out->numel() >= limit) return true;
    for (const buffer* b : c.in)
      if (b != nullptr && b->numel() >= limit) return true;
    for (int k = 0; k < c.operand_count; ++k)
      if (c.operands[k]->numel() >= limit) return true;
    return false;
  }

  static bool uses_f64(const call_t& c) {
    if (c.out->type() == dtype::f64) return true;
    for (const buffer* b : c.in)
      if (b != nullptr && b->type() == dtype::f64) return true;
    for (int k = 0; k < c.operand_count; ++k)
      if (c.operands[k]->type() == dtype::f64) return true;
    return false;
  }

  void axpby(const buffer& from, buffer& to, double alpha, double beta, const char* what) {
    state_->attention_cache_valid = false;
    if (to.numel() == 0) return;
    const detail::op_timer timer(*state_, what, to.type());
    const unsigned blocks = kernels::blocks_for(to.numel());
    if (from.type() == dtype::f64 || to.type() == dtype::f64)
      kernels::axpby_kernel<double, std::int64_t>
          <<<blocks, 256, 0, stream()>>>(in(from), out(to), to.numel(), alpha, beta);
    else if (to.numel() < (std::int64_t{1} << 31))
      kernels::axpby_kernel<float, std::uint32_t><<<blocks, 256, 0, stream()>>>(
          in(from), out(to), to.numel(), static_cast<float>(alpha), static_cast<float>(beta));
    else
      kernels::axpby_kernel<float, std::int64_t><<<blocks, 256, 0, stream()>>>(
          in(from), out(to), to.numel(), static_cast<float>(alpha), static_cast<float>(beta));
    launched(what);
  }

  void move_blocks(const buffer& from, buffer& to, compute::block_layout l, bool to_interleaved) {
    state_->attention_cache_valid = false;
    const std::size_t row = static_cast<std::size_t>(l.mid * l.inner * l.element_bytes);
    if (row == 0 || l.outer == 0) return;
    for (std::int64_t p = 0; p < l.parts; ++p) {
      const char* source = static_cast<const char*>(from.data());
      char* target = static_cast<char*>(to.data());
      const std::size_t blocked = static_cast<std::size_t>(p * l.outer) * row,
                        interleaved = static_cast<std::size_t>(p) * row;
      const std::size_t pitch = static_cast<std::size_t>(l.parts) * row;
      const cudaError_t status =
          to_interleaved
              ? cudaMemcpy2DAsync(target + interleaved, pitch, source + blocked, row, row,
                                  static_cast<std::size_t>(l.outer), cudaMemcpyDeviceToDevice, stream())
              : cudaMemcpy2DAsync(target + blocked, row, source + interleaved, pitch, row,
                                  static_cast<std::size_t>(l.outer), cudaMemcpyDeviceToDevice, stream());
      check_cuda(status, "backend: block move (cudaMemcpy2DAsync)");
    }
  }

  static element element_of(dtype t, std::string_view what) {
    switch (t) {
      case dtype::f64:
        return element::f64;
      case dtype::f32:
        return element::f32;
      case dtype::bf16:
        return element::bf16;
      case dtype::f16:
        return element::f16;
      default:
        break;
    }
    fail(detail::text("cuda::backend: ", what),
         detail::text("a matrix product of ", dtype_name(t), " values"),
         "give matrix products floating values");
  }

  // C (m, n) = op(A) op(B), row-major, batched: see matmul_problem.
  void product(const void* a, dtype at, const void* b, dtype bt, void* c, dtype ct, matmul_problem p,
               std::string_view what, const void* bias = nullptr) {
    p.a_type = element_of(at, what);
    p.b_type = element_of(bt, what);
    p.c_type = element_of(ct, what);
    state_->gemm.run(p, a, b, c, bias, stream(),
                     detail::text("cuda::backend: ", what, " (", p.m, " x ", p.k, ") . (", p.k, " x ", p.n,
                                  ") x ", p.batch));
  }

  // product(), with an epilogue cuBLASLt may have no algorithm for: false (nothing run) then.
  bool product_if_supported(const void* a, dtype at, const void* b, dtype bt, void* c, dtype ct,
                            matmul_problem p, std::string_view what, const epilogue_operands& e) {
    p.a_type = element_of(at, what);
    p.b_type = element_of(bt, what);
    p.c_type = element_of(ct, what);
    return state_->gemm.try_run(p, a, b, c, e, stream(),
                                detail::text("cuda::backend: ", what, " (", p.m, " x ", p.k, ") . (", p.k,
                                             " x ", p.n, ") x ", p.batch),
                                true);
  }

  // to[j] = sum over rows of source's term (i, j); with `values`, also values[j] = sum of dy's
  // column j: in the same pass where the vector kernel takes a normalized_product, else apart.
  template <class C>
  void column_sums(kernels::mut_ref to, std::int64_t rows, std::int64_t n, auto source,
                   const kernels::mut_ref* values = nullptr) {
    if (n == 0) return;
    constexpr kernels::column_term term = decltype(source)::term;
    constexpr bool normalized = term == kernels::column_term::normalized_product;
    const std::int64_t splits = std::max<std::int64_t>(
        1, (rows + kernels::column_rows_per_split - 1) / kernels::column_rows_per_split);
    const std::int64_t sums = normalized && values != nullptr ? 2 : 1;  // (splits, n) partials each
    C* partial = state_->scratch.get<C>(scratch_use::partials, static_cast<std::size_t>(sums * splits * n));
    const dim3 grid(static_cast<unsigned>((n + kernels::column_block_x - 1) / kernels::column_block_x),
                    static_cast<unsigned>(splits));
    const dim3 block(kernels::column_block_x, kernels::column_block_y);
    const dtype t = source.dy.type;
    bool values_summed = false;
    if (compute_type_is<C>(t) && vector_ready(t, n, {source.dy, normalized ? source.x : source.dy})) {
      const std::int64_t columns_per_block = kernels::column_block_x * vector_lanes(t);
      const dim3 vector_grid(static_cast<unsigned>((n + columns_per_block - 1) / columns_per_block),
                             static_cast<unsigned>(splits));
      with_vector_types(t, [&]<class T, class V>() {
        if constexpr (std::is_same_v<V, C>) {
          const auto launch = [&]<bool AlsoValues>() {
            kernels::column_partial_vector_kernel<T, C, term, AlsoValues>
                <<<vector_grid, block, 0, stream()>>>(static_cast<const T*>(source.dy.data),
                                                      static_cast<const T*>(source.x.data), source.stats,
                                                      partial, rows, n);
          };
          if constexpr (normalized)
            if (values != nullptr) {
              values_summed = true;
              return launch.template operator()<true>();
            }
          launch.template operator()<false>();
        }
      });
      if (values_summed) column_totals<C>(partial + splits * n, splits, *values, n);
    } else {
      kernels::column_partial_kernel<C><<<grid, block, 0, stream()>>>(source, partial, rows, n);
    }
    column_totals<C>(partial, splits, to, n);
    if (values != nullptr && !values_summed)
      column_sums<C>(
          *values, rows, n,
          kernels::column_source<C, kernels::column_term::value>{.dy = source.dy, .x = {}, .stats = nullptr});
  }

  // to[j] = sum over the splits of partial (splits, n).
  template <class C>
  void column_totals(const C* partial, std::int64_t splits, kernels::mut_ref to, std::int64_t n) {
    const unsigned grid = static_cast<unsigned>((n + kernels::column_block_x - 1) / kernels::column_block_x);
    kernels::column_total_kernel<C>
        <<<grid, dim3(kernels::column_block_x, kernels::column_block_y), 0, stream()>>>(partial, splits, to,
                                                                                        n);
  }

  // The vector kernels (kernels/vectorized.cuh) take calls whose buffers all hold one floating dtype t,
  // start on 16 bytes and hold whole vectors (numel a multiple of 16 / dtype_size(t)).
  static std::int64_t vector_lanes(dtype t) { return static_cast<std::int64_t>(16 / dtype_size(t)); }
  static bool vector_ready(dtype t, std::int64_t numel, std::initializer_list<kernels::ref> buffers) {
    if (t != dtype::f64 && t != dtype::f32 && t != dtype::bf16 && t != dtype::f16) return false;
    if (numel % vector_lanes(t) != 0) return false;
    for (const kernels::ref& b : buffers)
      if (b.type != t || reinterpret_cast<std::uintptr_t>(b.data) % 16 != 0) return false;
    return true;
  }
  static bool vector_ready(const kernels::chain_args& a) {
    const dtype t = a.out.type;
    if (!vector_ready(t, a.numel, {a.out, a.operands[0]})) return false;
    for (int s = 0; s < a.length; ++s) {
      const compute::elementwise_step& st = a.steps[s];
      if (st.operand >= 0 &&
          (st.period % vector_lanes(t) != 0 || !vector_ready(t, 0, {a.operands[st.operand]})))
        return false;
    }
    return true;
  }
  // Runs kernel<T, C>(grid) for the storage type T of t and its compute type C.
  template <class Launch>
  static void with_vector_types(dtype t, Launch&& launch) {
    switch (t) {
      case dtype::bf16:
        return launch.template operator()<__nv_bfloat16, float>();
      case dtype::f16:
        return launch.template operator()<__half, float>();
      case dtype::f32:
        return launch.template operator()<float, float>();
      default:
        return launch.template operator()<double, double>();
    }
  }

  template <class C, class I>
  void run_chain(const kernels::chain_args& a) {
    const unsigned threads = 256;
    if (!vector_ready(a))
      return kernels::chain_kernel<C, I><<<kernels::blocks_for(a.numel, threads), threads, 0, stream()>>>(a);
    const unsigned grid = kernels::blocks_for(a.numel / vector_lanes(a.out.type), threads);
    with_vector_types(a.out.type, [&]<class T, class V>() {
      kernels::chain_vector_kernel<T, V, I><<<grid, threads, 0, stream()>>>(a);
    });
  }

  template <class C, bool Gelu, class I>
  void run_activation_grad(const call_t& c) {
    const unsigned threads = 256;
    const kernels::ref x = in(c, 0), dy = in(c, 1);
    const kernels::mut_ref o = out(*c.out);
    const std::int64_t n = c.dims[0];
    if (!vector_ready(o.type, n, {x, dy, o}))
      return kernels::activation_grad_kernel<C, Gelu, I>
          <<<kernels::blocks_for(n, threads), threads, 0, stream()>>>(x, dy, o, n);
    const unsigned grid = kernels::blocks_for(n / vector_lanes(o.type), threads);
    with_vector_types(o.type, [&]<class T, class V>() {
      kernels::activation_grad_vector_kernel<T, V, Gelu, I><<<grid, threads, 0, stream()>>>(
          static_cast<const T*>(x.data), static_cast<const T*>(dy.data), static_cast<T*>(o.data), n);
    });
  }

  // split_heads / merge_heads: x (batch, seq, heads, head_dim) <-> (batch, heads, seq, head_dim).
  template <class C, bool Split, class I>
  void run_heads(const call_t& c) {
    const unsigned threads = 256;
    const std::int64_t* d = c.dims;
    const kernels::ref x = in(c, 0);
    const kernels::mut_ref y = out(*c.out);
    const std::int64_t numel = c.out->numel();
    if (!vector_ready(y.type, d[3], {x, y}))
      return kernels::heads_kernel<C, Split, I>
          <<<kernels::blocks_for(numel, threads), threads, 0, stream()>>>(x, y, d[1], d[2], d[3], numel);
    const std::int64_t lanes = vector_lanes(y.type), vectors = numel / lanes;
    kernels::heads_vector_kernel<Split, I><<<kernels::blocks_for(vectors, threads), threads, 0, stream()>>>(
        static_cast<const uint4*>(x.data), static_cast<uint4*>(y.data), d[1], d[2], d[3] / lanes, vectors);
  }

  // Norm rows of whole vectors, at most 256 of them, take one warp each (kernels/norms_by_warp.cuh):
  // launch<T, V, Vectors per lane>(grid). False: the call needs the block-per-row kernels.
  template <class Launch>
  bool run_by_warp(dtype t, std::int64_t rows, std::int64_t cols, std::initializer_list<kernels::ref> buffers,
                   Launch&& launch) {
    if (!vector_ready(t, cols, buffers) || cols / vector_lanes(t) > 256) return false;
    const unsigned grid =
        static_cast<unsigned>((rows + kernels::warp_rows_per_block - 1) / kernels::warp_rows_per_block);
    const bool narrow = cols / vector_lanes(t) <= 128;
    with_vector_types(t, [&]<class T, class V>() {
      if (narrow)
        launch.template operator()<T, V, 4>(grid);
      else
        launch.template operator()<T, V, 8>(grid);
    });
    return true;
  }

  // layer_norm: x, w, b; rms_norm: x, w.
  template <class C, bool Layer>
  void run_norm(const call_t& c) {
    const std::int64_t* d = c.dims;
    buffer& o = *c.out;
    if (run_by_warp(o.type(), d[0], d[1], {in(c, 0), in(c, 1), Layer ? in(c, 2) : in(c, 1), in(o)},
                    [&]<class T, class V, int K>(unsigned grid) {
                      kernels::norm_warp_kernel<T, V, K, Layer><<<grid, 256, 0, stream()>>>(
                          typed<T>(*c.in[0]), typed<T>(*c.in[1]), Layer ? typed<T>(*c.in[2]) : nullptr,
                          static_cast<T*>(o.data()), d[0], static_cast<int>(d[1]), c.scalar);
                    }))
      return;
    if constexpr (Layer)
      kernels::layer_norm_kernel<C><<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, stream()>>>(
          in(c, 0), in(c, 1), in(c, 2), out(o), d[1], c.scalar);
    else
      kernels::rms_norm_kernel<C><<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, stream()>>>(
          in(c, 0), in(c, 1), out(o), d[1], c.scalar);
  }

  // x, w, dy -> dx, and with kernel_call::weight_grad the weight (and bias) gradient too
  template <class C, bool Layer>
  void run_norm_grad_x(const call_t& c) {
    if (c.weight_grad != nullptr) return norm_gradients<C, Layer>(c);
    const std::int64_t* d = c.dims;
    buffer& o = *c.out;
    const buffer* addend = c.epilogue == compute::product_epilogue::add ? c.side : nullptr;
    if (run_by_warp(o.type(), d[0], d[1], {in(c, 0), in(c, 1), in(c, 2), in(o), addend ? in(*addend) : in(o)},
                    [&]<class T, class V, int K>(unsigned grid) {
                      kernels::norm_grad_x_warp_kernel<T, V, K, Layer><<<grid, 256, 0, stream()>>>(
                          typed<T>(*c.in[0]), typed<T>(*c.in[1]), typed<T>(*c.in[2]),
                          addend ? typed<T>(*addend) : nullptr, static_cast<T*>(o.data()), d[0],
                          static_cast<int>(d[1]), c.scalar);
                    }))
      return;
    if (addend != nullptr) {  // the block-per-row kernels, then the add
      const auto apart = compute::split_epilogue(c);
      run_norm_grad_x<C, Layer>(apart.product);
      return run_typed<C, std::int64_t>(apart.elementwise);
    }
    if constexpr (Layer)
      kernels::layer_norm_grad_x_kernel<C>
          <<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, stream()>>>(in(c, 0), in(c, 1), in(c, 2),
                                                                               out(o), d[1], c.scalar);
    else
      kernels::rms_norm_grad_x_kernel<C><<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, stream()>>>(
          in(c, 0), in(c, 1), in(c, 2), out(o), d[1], c.scalar);
  }

  // dx, dw (and db) in one pass (norm_gradients_warp_kernel, as many blocks as fit the GPU at
  // once), then the column totals of the blocks' partial sums; run() checked norm_gradients_fit.
  template <class C, bool Layer>
  void norm_gradients(const call_t& c) {
    const std::int64_t rows = c.dims[0], cols = c.dims[1];
    const bool bias = c.bias_grad != nullptr;
    const buffer* addend = c.epilogue == compute::product_epilogue::add ? c.side : nullptr;
    with_vector_types(c.out->type(), [&]<class T, class V>() {
      if constexpr (std::is_same_v<V, C>) {
        const std::int64_t vectors_per_lane = (cols / kernels::lanes<T> + 31) / 32;
        const auto launch = [&]<int Vectors, bool Bias>() {
          const auto kernel = kernels::norm_gradients_warp_kernel<T, C, Vectors, Layer, Bias>;
          constexpr std::size_t shared = kernels::norm_gradients_shared_bytes<T, C, Vectors, Bias>;
          const std::int64_t blocks =
              std::min(resident_blocks(kernel, shared),
                       (rows + kernels::warp_rows_per_block - 1) / kernels::warp_rows_per_block);
          C* partial = state_->scratch.get<C>(scratch_use::partials,
                                              static_cast<std::size_t>((Bias ? 2 : 1) * blocks * cols));
          kernel<<<static_cast<unsigned>(blocks), 256, shared, stream()>>>(
              typed<T>(*c.in[0]), typed<T>(*c.in[1]), typed<T>(*c.in[2]),
              addend ? typed<T>(*addend) : nullptr, static_cast<T*>(c.out->data()), partial, rows,
              static_cast<int>(cols), c.scalar);
          column_totals<C>(partial, blocks, out(*c.weight_grad), cols);
          if (Bias) column_totals<C>(partial + blocks * cols, blocks, out(*c.bias_grad), cols);
        };
        const auto with_bias = [&]<int Vectors>() {
          if (bias)
            launch.template operator()<Vectors, true>();
          else
            launch.template operator()<Vectors, false>();
        };
        static_assert(kernels::gradient_vectors_per_lane == 4);
        switch (vectors_per_lane) {
          case 1:
            return with_bias.template operator()<1>();
          case 2:
            return with_bias.template operator()<2>();
          case 3:
            return with_bias.template operator()<3>();
          default:
            return with_bias.template operator()<4>();
        }
      }
    });
  }

  // Blocks of `threads` with `shared` bytes of dynamic shared memory that the GPU runs at once
  // (occupancy times SMs): a grid of that many strides over all rows in one wave. Asked of CUDA
  // once per kernel and size; more than 48 KiB of shared memory is allowed to the kernel here.
  template <class Kernel>
  std::int64_t resident_blocks(Kernel kernel, std::size_t shared, unsigned threads = 256) {
    const auto key = std::tuple{reinterpret_cast<const void*>(kernel), shared, threads};
    auto found = state_->blocks_per_sm.find(key);
    if (found == state_->blocks_per_sm.end()) {
      if (shared > 48 * 1024)
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared)),
                   "backend (cudaFuncSetAttribute)");
      int per_sm = 0;
      check_cuda(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, static_cast<int>(threads), shared),
          "backend (cudaOccupancyMaxActiveBlocksPerMultiprocessor)");
      found = state_->blocks_per_sm.emplace(key, std::max(per_sm, 1)).first;
    }
    return std::int64_t{found->second} * state_->multiprocessors;
  }

  // A linear with a compute::product_epilogue in one cuBLASLt call (GELU_AUX[_BIAS], DGELU, or beta 1
  // with the side as addend) where cuBLASLt has one for these sizes and alignments and every buffer
  // has the output's 16-bit or f32 type; else the product, then the elementwise kernel it stands for.
  template <class C, class I>
  void linear_with_epilogue(const call_t& c) {
    const std::int64_t* d = c.dims;
    buffer& o = *c.out;
    bool same_types = o.type() != dtype::f64 && c.in[0]->type() == o.type() && c.in[1]->type() == o.type();
    for (const buffer* b : {static_cast<const buffer*>(c.side), c.bias})
      same_types = same_types && (b == nullptr || b->type() == o.type());
    const bool bias = c.bias != nullptr,
               gradient_with_bias = bias && c.epilogue == compute::product_epilogue::gelu_grad;
    if (same_types && !gradient_with_bias) {
      matmul_problem p{.m = d[0], .n = d[2], .k = d[1], .transpose_b = c.transpose_b};
      epilogue_operands e{.bias = bias ? c.bias->data() : nullptr};
      switch (c.epilogue) {
        case compute::product_epilogue::gelu:
          if (c.side != nullptr) e.aux = c.side->data();
          p.post = c.side != nullptr ? (bias ? epilogue::bias_gelu_aux : epilogue::gelu_aux)
                                     : (bias ? epilogue::bias_gelu : epilogue::gelu);
          break;
        case compute::product_epilogue::gelu_grad:
          p.post = epilogue::gelu_grad;
          e.aux = c.side->data();
          break;
        case compute::product_epilogue::add:
          p.post = bias ? epilogue::bias : epilogue::none;
          p.beta = 1;
          e.addend = c.side->data();
          break;
        case compute::product_epilogue::none:
          break;
      }
      if (product_if_supported(c.in[0]->data(), c.in[0]->type(), c.in[1]->data(), c.in[1]->type(), o.data(),
                               o.type(), p, "linear with epilogue", e))
        return;
    }
    const auto apart = compute::split_epilogue(c);
    run_typed<C, I>(apart.product);
    run_typed<C, I>(apart.elementwise);
  }

  // stats (rows, 2) of x (in 0) for the weight gradient.
  template <class C, bool Layer>
  void norm_statistics(const call_t& c, C* stats) {
    const std::int64_t* d = c.dims;
    if (run_by_warp(c.in[0]->type(), d[0], d[1], {in(c, 0)}, [&]<class T, class V, int K>(unsigned grid) {
          if constexpr (std::is_same_v<V, C>)
            kernels::norm_statistics_warp_kernel<T, V, K, Layer><<<grid, 256, 0, stream()>>>(
                typed<T>(*c.in[0]), stats, d[0], static_cast<int>(d[1]), c.scalar);
          else
            kernels::norm_statistics_kernel<C, Layer>
                <<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, stream()>>>(in(c, 0), stats, d[1],
                                                                                     c.scalar);
        }))
      return;
    kernels::norm_statistics_kernel<C, Layer>
        <<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, stream()>>>(in(c, 0), stats, d[1], c.scalar);
  }

  // A cross_entropy call's classes and ignore index (dims {rows, vocab, classes, divisor, ignore_index}).
  static kernels::loss_targets loss_targets_of(const call_t& c) {
    return {.classes = c.dims[2], .ignore_index = c.dims[4]};
  }
  // Cross-entropy rows of logits (in 0, rows x vocab) against targets (in 1): the vector kernels
  // for 16-byte aligned rows of whole vectors, whose logits are computed in C.
  // With kernel_call::output_kept, the vector kernels keep each row's log-sum-exp with the logits'
  // address for the gradient (kept_lse).
  template <class C>
  void cross_entropy_rows(const call_t& c, C* losses) {
    const std::int64_t* d = c.dims;
    const dtype t = c.in[0]->type();
    const unsigned rows = static_cast<unsigned>(d[0]);
    const void* logits = c.in[0]->data();
    if (vector_ready(t, d[1], {in(c, 0)}) && compute_type_is<C>(t)) {
      C* lse = c.output_kept
                   ? static_cast<C*>(kept_lse(logits, static_cast<std::size_t>(d[0]) * sizeof(C), true))
                   : nullptr;
      if (lse == nullptr) forget_lse(logits);
      return with_vector_types(t, [&]<class T, class V>() {
        if constexpr (std::is_same_v<V, C>)
          kernels::cross_entropy_rows_vector_kernel<T, C><<<rows, kernels::row_threads, 0, stream()>>>(
              typed<T>(*c.in[0]), in(c, 1), losses, d[1], loss_targets_of(c), state_->bad_target(), lse);
      });
    }
    forget_lse(logits);
    kernels::cross_entropy_rows_kernel<C><<<rows, kernels::row_threads, 0, stream()>>>(
        in(c, 0), in(c, 1), losses, d[1], loss_targets_of(c), state_->bad_target());
  }
  // The rows' losses and the logits' gradient for a loss gradient of 1 (kernel_call::logits_grad,
  // which may be the logits' memory): one kernel where the rows are 16-byte aligned whole vectors,
  // else the loss's kernel, then the gradient's (each reads an element before writing it).
  template <class C>
  void cross_entropy_with_gradient(const call_t& c, C* losses) {
    const std::int64_t* d = c.dims;
    buffer& g = *c.logits_grad;
    const dtype t = g.type();
    const unsigned rows = static_cast<unsigned>(d[0]);
    forget_lse(c.in[0]->data());
    if (c.in[0]->type() == t && vector_ready(t, d[1], {in(c, 0), in(g)}) && compute_type_is<C>(t)) {
      return with_vector_types(t, [&]<class T, class V>() {
        if constexpr (std::is_same_v<V, C>) {
          const T* logits = typed<T>(*c.in[0]);
          T* gradient = static_cast<T*>(g.data());
          const C scale = C(1) / C(d[3]);
          // Two rows in shared memory, with room for the reductions' static shared memory.
          const std::size_t shared = kernels::loss_grad_staged_bytes<T>(d[1]);
          if (shared + 1024 <= state_->shared_per_block) {
            const auto kernel = kernels::cross_entropy_with_grad_staged_kernel<T, C>;
            const std::int64_t blocks =
                std::min<std::int64_t>(resident_blocks(kernel, shared, kernels::loss_grad_threads), d[0]);
            kernel<<<static_cast<unsigned>(blocks), kernels::loss_grad_threads, shared, stream()>>>(
                logits, in(c, 1), losses, gradient, d[0], d[1], loss_targets_of(c), scale, state_->bad_target());
          } else {
            kernels::cross_entropy_with_grad_vector_kernel<T, C>
                <<<rows, kernels::loss_grad_threads, 0, stream()>>>(
                    logits, in(c, 1), losses, gradient, d[1], loss_targets_of(c), scale, state_->bad_target());
          }
        }
      });
    }
    kernels::cross_entropy_rows_kernel<C><<<rows, kernels::row_threads, 0, stream()>>>(
        in(c, 0), in(c, 1), losses, d[1], loss_targets_of(c), state_->bad_target());
    kernels::cross_entropy_grad_kernel<C><<<rows, kernels::row_threads, 0, stream()>>>(
        in(c, 0), in(c, 1), kernels::ref{}, out(g), d[1], loss_targets_of(c), C(d[3]), state_->bad_target());
  }
  // ids (in 0, n), dout (in 1, (n, cols)) -> the table's gradient (table_rows, cols), each row the
  // sum of its tokens' rows in token order (kernels/embedding.cuh): the tokens sorted by row with
  // CUB's radix sort (stable), each row's range marked, then a warp writes each row once. No
  // atomics: the same bits every run, and the cpu backend's.
  template <class C, class I>
  void embedding_grad(const call_t& c) {
    const std::int64_t n = c.dims[0], table_rows = c.dims[1], cols = c.dims[2], row_offset = c.dims[3];
    if (n > std::int64_t{1} << 31 || table_rows >= std::int64_t{1} << 31)
      fail("cuda::backend: embedding_grad",
           detail::text(n, " tokens into ", table_rows, " rows: the token sort takes under 2^31 of each"),
           "split the batch into micro-batches, or the table over more ranks");
    int bits = 1;  // the sort's key bits: rows 0 .. table_rows (the key of ids outside the table)
    while ((std::int64_t{1} << bits) <= table_rows) ++bits;
    const int items = static_cast<int>(n);
    std::size_t sort_bytes = 0;
    check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const unsigned*>(nullptr),
                                               static_cast<unsigned*>(nullptr),
                                               static_cast<const unsigned*>(nullptr),
                                               static_cast<unsigned*>(nullptr), items, 0, bits, stream()),
               "backend: embedding_grad (cub::DeviceRadixSort, its memory)");
    const auto aligned = [](std::int64_t count) {
      return static_cast<std::size_t>((count * 4 + 255) / 256 * 256);
    };
    const std::size_t token_bytes = aligned(n), row_bytes = aligned(table_rows);
    auto* base = static_cast<unsigned char*>(
        state_->scratch.get(scratch_use::token_order, 4 * token_bytes + 2 * row_bytes + sort_bytes));
    const auto at = [&](std::size_t offset) { return reinterpret_cast<unsigned*>(base + offset); };
    unsigned *keys = at(0), *sorted = at(token_bytes), *order = at(2 * token_bytes),
             *sorted_order = at(3 * token_bytes), *begin = at(4 * token_bytes),
             *end = at(4 * token_bytes + row_bytes);
    check_cuda(cudaMemsetAsync(begin, 0, 2 * row_bytes, stream()),
               "backend: embedding_grad (cudaMemsetAsync)");
    const unsigned threads = 256;
    if (n > 0) {
      kernels::embedding_rows_of_tokens_kernel<I><<<kernels::blocks_for(n, threads), threads, 0, stream()>>>(
          in(c, 0), keys, order, n, table_rows, row_offset);
      check_cuda(cub::DeviceRadixSort::SortPairs(base + 4 * token_bytes + 2 * row_bytes, sort_bytes, keys,
                                                 sorted, order, sorted_order, items, 0, bits, stream()),
                 "backend: embedding_grad (cub::DeviceRadixSort)");
      kernels::embedding_row_ranges_kernel<I>
          <<<kernels::blocks_for(n, threads), threads, 0, stream()>>>(sorted, n, table_rows, begin, end);
    }
    const dtype t = c.out->type();
    const bool adds = c.epilogue == compute::product_epilogue::add;  // + side's row (a tied table)
    if (vector_ready(t, cols, {in(c, 1), in(*c.out)}) && (!adds || vector_ready(t, cols, {in(*c.side)})) &&
        compute_type_is<C>(t))
      return with_vector_types(t, [&]<class T, class V>() {
        if constexpr (std::is_same_v<V, C>)
          kernels::embedding_grad_rows_vector_kernel<T, C>
              <<<kernels::blocks_for(table_rows * 32, threads), threads, 0, stream()>>>(
                  typed<T>(*c.in[1]), sorted_order, begin, end, adds ? typed<T>(*c.side) : nullptr,
                  static_cast<T*>(c.out->data()), table_rows, cols);
      });
    kernels::embedding_grad_rows_kernel<C>
        <<<kernels::blocks_for(table_rows * 32, threads), threads, 0, stream()>>>(
            in(c, 1), sorted_order, begin, end, adds ? in(*c.side) : kernels::ref{}, out(*c.out), table_rows,
            cols);
  }
  // logits (in 0), targets (in 1), the loss's gradient (in 2) -> dlogits
  template <class C>
  void cross_entropy_grad(const call_t& c) {
    const std::int64_t* d = c.dims;
    buffer& o = *c.out;
    const dtype t = o.type();
    const unsigned rows = static_cast<unsigned>(d[0]);
    if (vector_ready(t, d[1], {in(c, 0), in(o)}) && compute_type_is<C>(t)) {
      const C* lse = c.side != nullptr
                         ? static_cast<const C*>(
                               kept_lse(c.in[0]->data(), static_cast<std::size_t>(d[0]) * sizeof(C), false))
                         : nullptr;
      return with_vector_types(t, [&]<class T, class V>() {
        if constexpr (std::is_same_v<V, C>)
          kernels::cross_entropy_grad_vector_kernel<T, C><<<rows, kernels::row_threads, 0, stream()>>>(
              typed<T>(*c.in[0]), in(c, 1), in(c, 2), static_cast<T*>(o.data()), d[1], loss_targets_of(c),
              C(d[3]), state_->bad_target(), lse);
      });
    }
    kernels::cross_entropy_grad_kernel<C><<<rows, kernels::row_threads, 0, stream()>>>(
        in(c, 0), in(c, 1), in(c, 2), out(o), d[1], loss_targets_of(c), C(d[3]), state_->bad_target());
  }
  // Whether the vector kernels of dtype t compute in C (double for f64, float otherwise).
  template <class C>
  static bool compute_type_is(dtype t) {
    return std::is_same_v<C, double> == (t == dtype::f64);
  }

  template <class C, class I>
  void run_typed(const call_t& c) {
    const std::int64_t* d = c.dims;
    buffer& o = *c.out;
    const unsigned threads = 256;
    auto blocks = [&](std::int64_t n) { return kernels::blocks_for(n, threads); };
    auto rows_grid = [](std::int64_t rows) { return static_cast<unsigned>(rows); };
    if (o.numel() == 0) return;
    const bool product_op = c.kind == op::linear || c.kind == op::matmul || c.kind == op::linear_weight_grad;
    const bool row_op =
        c.kind == op::layer_norm_grad_w || c.kind == op::rms_norm_grad_w || c.kind == op::bias_grad;
    if ((product_op && (d[0] == 0 || d[1] == 0 || d[2] == 0 || (c.kind == op::matmul && d[3] == 0))) ||
        (row_op && d[0] == 0))
      return fill_zero(o);  // an empty sum: zero, as on the cpu
    switch (c.kind) {
      case op::embedding:  // ids, table (table_rows, cols) -> (n, cols); dims (n, table_rows, cols, offset)
        if (vector_ready(o.type(), d[2], {in(c, 1), in(o)}))
          return with_vector_types(o.type(), [&]<class T, class V>() {
            kernels::embedding_vector_kernel<T, I>
                <<<blocks(d[0] * d[2] / kernels::lanes<T>), threads, 0, stream()>>>(
                    in(c, 0), typed<T>(*c.in[1]), static_cast<T*>(o.data()), d[0], d[1], d[2], d[3]);
          });
        return kernels::embedding_kernel<C, I><<<blocks(d[0] * d[2]), threads, 0, stream()>>>(
            in(c, 0), in(c, 1), out(o), d[0], d[1], d[2], d[3]);
      case op::position_embedding:  // x (batch, seq, cols) + table[t]
        if (vector_ready(o.type(), d[2], {in(c, 0), in(c, 1), in(o)}) && compute_type_is<C>(o.type()))
          return with_vector_types(o.type(), [&]<class T, class V>() {
            if constexpr (std::is_same_v<V, C>)
              kernels::position_embedding_vector_kernel<T, C, I>
                  <<<blocks(o.numel() / kernels::lanes<T>), threads, 0, stream()>>>(
                      typed<T>(*c.in[0]), typed<T>(*c.in[1]), static_cast<T*>(o.data()), d[1], d[2],
                      o.numel());
          });
        return kernels::position_embedding_kernel<C, I><<<blocks(o.numel()), threads, 0, stream()>>>(
            in(c, 0), in(c, 1), out(o), d[1], d[2], d[0] * d[1] * d[2]);
      case op::linear: {
        if (c.epilogue != compute::product_epilogue::none) return linear_with_epilogue<C, I>(c);
        // The bias in cuBLASLt's epilogue, except in f64 (added by a second pass there). A batch
        // (kernel_call::batch, never f64) shares x: its stride is 0.
        const bool fused_bias = c.bias != nullptr && o.type() != dtype::f64;
        product(c.in[0]->data(), c.in[0]->type(), c.in[1]->data(), c.in[1]->type(), o.data(), o.type(),
                {.m = d[0],
                 .n = d[2],
                 .k = d[1],
                 .transpose_b = c.transpose_b,
                 .post = fused_bias ? epilogue::bias : epilogue::none,
                 .batch = c.batch,
                 .stride_b = c.batch_strides[0],
                 .stride_c = c.batch_strides[1],
                 .stride_bias = c.batch_strides[2]},
                c.batch > 1 ? "linear (batched)" : "linear", fused_bias ? c.bias->data() : nullptr);
        if (c.bias == nullptr || fused_bias) return;
        kernels::chain_args a;
        a.out = out(o);
        a.operands[0] = in(o);
        a.operands[1] = in(*c.bias);
        a.steps[0] = {op::add_bias, 1, d[2]};
        a.length = 1;
        a.numel = o.numel();
        return kernels::chain_kernel<C, I><<<blocks(a.numel), threads, 0, stream()>>>(a);
      }
      case op::matmul:
        return product(c.in[0]->data(), c.in[0]->type(), c.in[1]->data(), c.in[1]->type(), o.data(), o.type(),
                       {.m = d[1],
                        .n = d[3],
                        .k = d[2],
                        .batch = d[0],
                        .stride_a = d[1] * d[2],
                        .stride_b = d[2] * d[3],
                        .stride_c = d[1] * d[3]},
                       "matmul");
      case op::layer_norm:
        return run_norm<C, true>(c);
      case op::rms_norm:
        return run_norm<C, false>(c);
      case op::softmax:
        return kernels::softmax_kernel<C><<<rows_grid(d[0]), kernels::row_threads, 0, stream()>>>(
            in(c, 0), out(o), d[1], d[1], false, C(1));
      case op::rope:
      case op::rope_grad:
        if (c.rope == nullptr || c.rope->pairs != d[3] / 2)
          fail("cuda::backend: " + std::string(op_name(c.kind)),
               "the call carries no frequency table (kernel_call::rope) for head_dim " + std::to_string(d[3]),
               "set it to a compute::make_rope_frequencies table, as the executor does at bind");
        return kernels::rope_kernel<C, I><<<blocks(o.numel() / 2), threads, 0, stream()>>>(
            in(c, 0), out(o), d[2], d[3], *c.rope, c.kind == op::rope ? 1.0 : -1.0, o.numel() / 2);
      case op::split_heads:
        return run_heads<C, true, I>(c);
      case op::merge_heads:
        return run_heads<C, false, I>(c);
      case op::attention:
        return attention_forward<C>(c);
      case op::attention_grad_q:
      case op::attention_grad_k:
      case op::attention_grad_v:
        return attention_backward<C>(c);
      case op::cross_entropy: {
        C* losses = state_->scratch.get<C>(scratch_use::row_losses, static_cast<std::size_t>(d[0]));
        if (d[0] == 0) return fill_zero(o);
        if (c.logits_grad != nullptr)
          cross_entropy_with_gradient<C>(c, losses);
        else
          cross_entropy_rows<C>(c, losses);
        return kernels::sum_rows_kernel<C><<<1, 1024, 0, stream()>>>(losses, d[0], C(d[3]), out(o));
      }
      case op::cross_entropy_grad:
        return cross_entropy_grad<C>(c);
      case op::add:
      case op::mul:
      case op::add_bias:
      case op::gelu:
      case op::silu: {
        kernels::chain_args a;
        a.out = out(o);
        for (int k = 0; k < c.operand_count; ++k) a.operands[k] = in(*c.operands[k]);
        for (int s = 0; s < c.chain_length; ++s) a.steps[s] = c.chain[s];
        a.length = c.chain_length;
        a.numel = d[0];
        return run_chain<C, I>(a);
      }
      case op::transpose:
        return kernels::transpose_kernel<C, I>
            <<<blocks(o.numel()), threads, 0, stream()>>>(in(c, 0), out(o), d[1], d[2], d[0] * d[1] * d[2]);
      case op::linear_weight_grad: {  // x (rows, k), dy (rows, n): (k, n) = x^T dy, or (n, k) = dy^T x
        // kernel_call::bias_grad: dy's column sums by the column-sum kernels after the product, or
        // (backend_options::bias_grad_in_product) in its epilogue where cuBLASLt has one (16-bit
        // and f32). A batch (kernel_call::batch) shares x (stride 0) and strides dy, the result and
        // the bias gradient: one batched product, then each member's column sums.
        const bool sums = c.bias_grad != nullptr;  // run() checked that no dimension is empty
        matmul_problem p = c.transpose_b
                               ? matmul_problem{.m = d[2], .n = d[1], .k = d[0], .transpose_a = true}
                               : matmul_problem{.m = d[1], .n = d[2], .k = d[0], .transpose_a = true};
        const buffer& a = c.transpose_b ? *c.in[1] : *c.in[0];
        const buffer& b = c.transpose_b ? *c.in[0] : *c.in[1];
        p.batch = c.batch;
        (c.transpose_b ? p.stride_a : p.stride_b) = c.batch_strides[0];
        p.stride_c = c.batch_strides[1];
        p.stride_bias = c.batch_strides[2];
        bool summed = false;
        if (sums && options_.bias_grad_in_product && o.type() != dtype::f64 &&
            c.bias_grad->type() == o.type()) {
          p.post = c.transpose_b ? epilogue::bias_grad_of_a : epilogue::bias_grad_of_b;
          summed = product_if_supported(a.data(), a.type(), b.data(), b.type(), o.data(), o.type(), p,
                                        c.batch > 1 ? "linear_weight_grad with bias gradient (batched)"
                                                    : "linear_weight_grad with bias gradient",
                                        {.bias = c.bias_grad->data()});
        }
        if (!summed) {
          p.post = epilogue::none;
          product(a.data(), a.type(), b.data(), b.type(), o.data(), o.type(), p, "linear_weight_grad");
          std::array<buffer, 3> views;  // each member's dy into its own bias gradient
          for (std::int64_t k = 0; sums && k < c.batch; ++k) {
            const call_t member = compute::batch_member(c, k, views);
            column_sums<C>(out(*member.bias_grad), d[0], d[2],
                           kernels::column_source<C, kernels::column_term::value>{
                               .dy = in(member, 1), .x = {}, .stats = nullptr});
          }
        }
        return;
      }
      case op::bias_grad:
        return column_sums<C>(out(o), d[0], d[1],
                              kernels::column_source<C, kernels::column_term::value>{
                                  .dy = in(c, 0), .x = {}, .stats = nullptr});
      case op::position_embedding_grad: {  // rows t < seq of the table: sums over the batch
        const std::int64_t n = d[1] * d[2];
        if (vector_ready(o.type(), n, {in(c, 0), in(o)}) && compute_type_is<C>(o.type())) {
          const std::size_t written = static_cast<std::size_t>(n) * dtype_size(o.type());
          check_cuda(
              cudaMemsetAsync(static_cast<char*>(o.data()) + written, 0, o.size_bytes() - written, stream()),
              "backend: position_embedding_grad (cudaMemsetAsync)");  // rows t >= seq
          return with_vector_types(o.type(), [&]<class T, class V>() {
            if constexpr (std::is_same_v<V, C>)
              kernels::position_embedding_grad_vector_kernel<T, C, I>
                  <<<blocks(n / kernels::lanes<T>), threads, 0, stream()>>>(
                      typed<T>(*c.in[0]), static_cast<T*>(o.data()), d[0], n);
          });
        }
        fill_zero(o);
        return column_sums<C>(out(o), d[0], n,
                              kernels::column_source<C, kernels::column_term::value>{
                                  .dy = in(c, 0), .x = {}, .stats = nullptr});
      }
      case op::gelu_grad:
        return run_activation_grad<C, true, I>(c);
      case op::silu_grad:
        return run_activation_grad<C, false, I>(c);
      case op::layer_norm_grad_x:
        return run_norm_grad_x<C, true>(c);
      case op::rms_norm_grad_x:
        return run_norm_grad_x<C, false>(c);
      case op::layer_norm_grad_w:
      case op::rms_norm_grad_w: {  // x (rows, cols), dy (rows, cols): dw[j] = sum_i dy x_hat
        C* stats = state_->scratch.get<C>(scratch_use::row_statistics, static_cast<std::size_t>(2 * d[0]));
        if (c.kind == op::layer_norm_grad_w)
          norm_statistics<C, true>(c, stats);
        else
          norm_statistics<C, false>(c, stats);
        // kernel_call::bias_grad (a layer norm's): dy's column sums in the same pass
        const kernels::mut_ref bias_sums = c.bias_grad != nullptr ? out(*c.bias_grad) : kernels::mut_ref{};
        return column_sums<C>(out(o), d[0], d[1],
                              kernels::column_source<C, kernels::column_term::normalized_product>{
                                  .dy = in(c, 1), .x = in(c, 0), .stats = stats},
                              c.bias_grad != nullptr ? &bias_sums : nullptr);
      }
      case op::softmax_grad:
        return kernels::softmax_grad_kernel<C><<<rows_grid(d[0]), kernels::row_threads, 0, stream()>>>(
            in(c, 0), in(c, 1), out(o), d[1], d[1], false, C(1));
      case op::embedding_grad:  // ids (n), dout (n, cols) -> table (table_rows, cols)
        return embedding_grad<C, I>(c);
      case op::ones:
        return kernels::fill_kernel<C, I>
            <<<blocks(d[0]), threads, 0, stream()>>>(out(o), d[0], c.scalar != 0 ? C(c.scalar) : C(1));
      default:
        fail("cuda::backend", detail::text("op ", op_name(c.kind), " has no cuda kernel"),
             "this is a bug in the executor; please report it");
    }
  }

  // Causal attention as batched GEMMs (attention.hpp's shapes): per (batch, kv head) the group of
  // query heads it serves is one (group * seq, head_dim) matrix, so GQA needs no copies of k, v.
  struct attention_shape {
    std::int64_t batch, heads, kv_heads, seq, head_dim, group, products, rows;
    double scale;  // of the scores (compute::attention_scale)
  };
  static attention_shape attention_of(const call_t& c) {
    const std::int64_t* d = c.dims;
    const std::int64_t group = d[2] > 0 ? d[1] / d[2] : 1;
    const double scale = compute::attention_scale(c.scalar, d[4]);
    return {d[0], d[1], d[2], d[3], d[4], group, d[0] * d[2], group * d[3], scale};
  }
  // Scores and their gradients in the inputs' dtype (16-bit products accumulate in f32 and round
  // once, as PyTorch's unfused attention under autocast), halving the traffic of f32 scores.
  static dtype score_type(dtype inputs) { return inputs; }

  // The three shapes of attention's batched products, one product per (batch, kv head):
  // (rows, head_dim) . (seq, head_dim)^T -> (rows, seq): S = Q K^T, dP = dO V^T
  static matmul_problem scores_product(const attention_shape& a) {
    return {.m = a.rows,
            .n = a.seq,
            .k = a.head_dim,
            .transpose_b = true,
            .batch = a.products,
            .stride_a = a.rows * a.head_dim,
            .stride_b = a.seq * a.head_dim,
            .stride_c = a.rows * a.seq};
  }
  // (rows, seq) . (seq, head_dim) -> (rows, head_dim): O = P V, dQ = dS K
  static matmul_problem times_values_product(const attention_shape& a) {
    return {.m = a.rows,
            .n = a.head_dim,
            .k = a.seq,
            .batch = a.products,
            .stride_a = a.rows * a.seq,
            .stride_b = a.seq * a.head_dim,
            .stride_c = a.rows * a.head_dim};
  }
  // (rows, seq)^T . (rows, head_dim) -> (seq, head_dim): dK = dS^T Q, dV = P^T dO (summing the group)
  static matmul_problem transposed_product(const attention_shape& a) {
    return {.m = a.seq,
            .n = a.head_dim,
            .k = a.rows,
            .transpose_a = true,
            .batch = a.products,
            .stride_a = a.rows * a.seq,
            .stride_b = a.rows * a.head_dim,
            .stride_c = a.seq * a.head_dim};
  }

  // S = Q K^T (scores, f32/f64), then P = causal softmax(S * scale) in the inputs' dtype.
  template <class C>
  void attention_probabilities(const buffer& q, const buffer& k, const attention_shape& a, void* scores,
                               void* p) {
    const dtype t = q.type(), st = score_type(t);
    product(q.data(), t, k.data(), k.type(), scores, st, scores_product(a), "attention scores");
    const C scale = C(a.scale);
    kernels::softmax_kernel<C>
        <<<static_cast<unsigned>(a.products * a.rows), kernels::row_threads, 0, stream()>>>(
            kernels::ref{scores, st}, kernels::mut_ref{p, t}, a.seq, a.seq, true, scale);
  }

  static kernels::flash::shape flash_shape_of(const call_t& c, const attention_shape& a) {
    const double scale = a.scale;
    return {.batch = static_cast<int>(a.batch),
            .heads = static_cast<int>(a.heads),
            .kv_heads = static_cast<int>(a.kv_heads),
            .seq = static_cast<int>(a.seq),
            .scale = static_cast<float>(scale),
            .scale_log2 = static_cast<float>(scale * 1.4426950408889634),
            .token_major = c.token_major};
  }

  // A token-major attention call that flash attention does not take (f32, f64, another head_dim):
  // on head-major copies of its operands (compute::run_token_major_apart), in one scratch buffer.
  // Its backward runs the batched products again: no log-sum-exp stays kept with its result.
  void run_token_major_apart(const call_t& call) {
    if (call.kind == op::attention) forget_lse(call.out->data());
    std::int64_t numel = call.out->numel();
    for (const buffer* b : call.in)
      if (b != nullptr) numel += b->numel();
    buffer& held = state_->head_major;
    if (held.numel() < numel || held.type() != call.type) {
      ++state_->moves;
      held = buffer();
      held = allocate(call.type, numel);
    }
    std::size_t offset = 0;
    compute::run_token_major_apart(
        call, [&](const call_t& c) { run(c); },
        [&](const buffer& like) {
          buffer copy = buffer::view_of(held, offset, like.type(), like.numel());
          offset += like.size_bytes();
          return copy;
        });
  }
  template <class T>
  static const T* typed(const buffer& b) {
    return static_cast<const T*>(b.data());
  }

  // Flash attention takes 16-bit inputs with head_dim 64, in 16-byte aligned buffers (its vector loads).
  static bool flash_applies(const call_t& c, const attention_shape& a) {
    if (!kernels::flash::supports(c.in[0]->type(), a.head_dim) || a.seq > (1 << 30)) return false;
    return aligned_operands(c);
  }

  // cuDNN's fused attention takes the call: chosen, built with cuDNN, a shape its graphs take
  // (cudnn_attention::supports), 16-byte aligned buffers. Forward and backward decide alike, so a
  // kept log-sum-exp (cuDNN's natural log, the own kernels' log2) is read by the kernel that wrote it.
  bool cudnn_applies([[maybe_unused]] const call_t& c, [[maybe_unused]] const attention_shape& a) const {
#if SHARDGRAPH_CUDA_CUDNN
    return state_->cudnn != nullptr && aligned_operands(c) &&
           cuda::cudnn_attention::supports(cudnn_shape_of(c, a), a.kv_heads);
#else
    return false;
#endif
  }

#if SHARDGRAPH_CUDA_CUDNN
  static cuda::cudnn_attention::shape cudnn_shape_of(const call_t& c, const attention_shape& a) {
    return {.batch = a.batch,
            .heads = a.heads,
            .seq = a.seq,
            .head_dim = a.head_dim,
            .type = c.in[0]->type(),
            .token_major = c.token_major,
            .scale = a.scale};
  }
  // cuDNN's workspace for the forward and the backward of s: one region, so that the backward does
  // not grow it after a step was recorded.
  void* cudnn_workspace(const cuda::cudnn_attention::shape& s) {
    const std::size_t bytes = std::max(
        {state_->cudnn->forward_workspace(s), state_->cudnn->backward_workspace(s), std::size_t{256}});
    return state_->scratch.get(scratch_use::attention_workspace, bytes);
  }
  void cudnn_forward(const call_t& c, const attention_shape& a) {
    const auto s = cudnn_shape_of(c, a);
    float* lse = c.output_kept ? kept_lse(c.out->data(), a, true) : nullptr;
    if (lse == nullptr) {
      forget_lse(c.out->data());
      lse = state_->scratch.get<float>(scratch_use::attention_statistics,
                                       static_cast<std::size_t>(a.batch * a.heads * a.seq));
    }
    void* workspace = cudnn_workspace(s);
    state_->cudnn->forward(s, c.in[0]->data(), c.in[1]->data(), c.in[2]->data(), c.out->data(), lse,
                           workspace, stream());
  }
  // With the forward's output and statistics kept, the backward reads them; else cuDNN's forward
  // runs again into scratch first.
  void cudnn_backward(const call_t& c, const attention_shape& a, void* dq, void* dk, void* dv) {
    const auto s = cudnn_shape_of(c, a);
    const void *q = c.in[0]->data(), *k = c.in[1]->data(), *v = c.in[2]->data();
    float* lse = c.side != nullptr ? kept_lse(c.side->data(), a, false) : nullptr;
    const void* out = lse != nullptr ? c.side->data() : nullptr;
    void* workspace = cudnn_workspace(s);
    if (lse == nullptr) {
      lse = state_->scratch.get<float>(scratch_use::attention_statistics,
                                       static_cast<std::size_t>(a.batch * a.heads * a.seq));
      void* recomputed = state_->scratch.get(scratch_use::attention_output, c.in[0]->size_bytes());
      state_->cudnn->forward(s, q, k, v, recomputed, lse, workspace, stream());
      out = recomputed;
    }
    state_->cudnn->backward(s, q, k, v, out, c.in[3]->data(), lse, dq, dk, dv, workspace, stream());
  }
#else  // never called: cudnn_applies is false
  [[noreturn]] static void cudnn_forward(const call_t&, const attention_shape&) { built_without_cudnn(); }
  [[noreturn]] static void cudnn_backward(const call_t&, const attention_shape&, void*, void*, void*) {
    built_without_cudnn();
  }
  [[noreturn]] static void built_without_cudnn() {
    fail("cuda::backend: attention", "cuDNN's attention was asked for in a build without cuDNN",
         "this is a bug in shardgraph; please report it");
  }
#endif

  static bool aligned_operands(const call_t& c) {
    const auto aligned = [](const buffer* b) {
      return b == nullptr || reinterpret_cast<std::uintptr_t>(b->data()) % 16 == 0;
    };
    for (const buffer* b : c.in)
      if (!aligned(b)) return false;
    return aligned(c.out) && aligned(c.key_grad) && aligned(c.value_grad);
  }

  // The log-sum-exp kept with a flash attention output for its backward (kernel_call::output_kept).
  float* kept_lse(const void* out, const attention_shape& a, bool make) {
    return static_cast<float*>(
        kept_lse(out, static_cast<std::size_t>(a.batch * a.heads * a.seq) * sizeof(float), make));
  }
  // `bytes` of row statistics kept with the value at `key`: made when `make` (else nullptr if none
  // of that size is kept).
  void* kept_lse(const void* key, std::size_t bytes, bool make) {
    const auto found = state_->kept_lse.find(key);
    if (found != state_->kept_lse.end() && found->second.size_bytes() == bytes) return found->second.data();
    if (!make) return nullptr;
    ++state_->moves;
    device_buffer& lse = state_->kept_lse[key];
    lse = device_buffer();
    lse = device_buffer(bytes);
    return lse.data();
  }

  void forget_lse(const void* out) {
    if (state_->kept_lse.erase(out) != 0) ++state_->moves;
  }

  template <class T>
  void flash_forward(const call_t& c, const attention_shape& a) {
    float* lse = c.output_kept ? kept_lse(c.out->data(), a, true) : nullptr;
    if (lse == nullptr) forget_lse(c.out->data());
    kernels::flash::forward<T>(typed<T>(*c.in[0]), typed<T>(*c.in[1]), typed<T>(*c.in[2]),
                               static_cast<T*>(c.out->data()), lse, flash_shape_of(c, a), stream());
    check_cuda(cudaGetLastError(), "backend: flash attention (launch)");
  }
  // With the forward's output kept (kernel_call::side) and its log-sum-exp with it, the backward
  // reads them; else it runs the forward again into scratch.
  template <class T>
  void flash_backward(const call_t& c, const attention_shape& a, void* dq, void* dk, void* dv) {
    const std::size_t rows = static_cast<std::size_t>(a.batch * a.heads * a.seq);
    float* lse = c.side != nullptr ? kept_lse(c.side->data(), a, false) : nullptr;
    const bool kept = lse != nullptr;
    T* out = kept
                 ? static_cast<T*>(c.side->data())
                 : static_cast<T*>(state_->scratch.get(scratch_use::attention_output, c.in[0]->size_bytes()));
    float* statistics = state_->scratch.get<float>(scratch_use::attention_statistics, 2 * rows);
    kernels::flash::backward<T>(typed<T>(*c.in[0]), typed<T>(*c.in[1]), typed<T>(*c.in[2]),
                                typed<T>(*c.in[3]), static_cast<T*>(dq), static_cast<T*>(dk),
                                static_cast<T*>(dv), out, kept ? lse : statistics, statistics + rows,
                                flash_shape_of(c, a), stream(), kept);
    check_cuda(cudaGetLastError(), "backend: flash attention gradient (launch)");
  }

  template <class C>
  void attention_forward(const call_t& c) {
    const attention_shape a = attention_of(c);
    const buffer &q = *c.in[0], &k = *c.in[1], &v = *c.in[2];
    if (k.type() != q.type() || v.type() != q.type() || c.out->type() != q.type())
      fail("cuda::backend: attention", "q, k, v and the output must share a dtype",
           "this is a bug in the executor; please report it");
    if (cudnn_applies(c, a)) return cudnn_forward(c, a);
    if (flash_applies(c, a))
      return q.type() == dtype::bf16 ? flash_forward<__nv_bfloat16>(c, a) : flash_forward<__half>(c, a);
    forget_lse(c.out->data());  // (its backward runs the batched products again)
    const std::size_t score_elements = static_cast<std::size_t>(a.products * a.rows * a.seq);
    void* scores =
        state_->scratch.get(scratch_use::scores, score_elements * dtype_size(score_type(q.type())));
    void* p = state_->scratch.get(scratch_use::probabilities, score_elements * dtype_size(q.type()));
    attention_probabilities<C>(q, k, a, scores, p);
    product(p, q.type(), v.data(), v.type(), c.out->data(), c.out->type(), times_values_product(a),
            "attention output");
  }

  // dq, dk and dv as batched GEMMs around the softmax's gradient (the scores in scratch).
  template <class C>
  void batched_attention_backward(const call_t& c, const attention_shape& a, void* dq, void* dk, void* dv) {
    const buffer &q = *c.in[0], &k = *c.in[1], &v = *c.in[2], &dout = *c.in[3];
    const dtype t = q.type(), st = score_type(t);
    const std::size_t score_elements = static_cast<std::size_t>(a.products * a.rows * a.seq);
    void* scores = state_->scratch.get(scratch_use::scores, score_elements * dtype_size(st));
    void* p = state_->scratch.get(scratch_use::probabilities, score_elements * dtype_size(t));
    void* ds = state_->scratch.get(scratch_use::score_gradients, score_elements * dtype_size(t));
    attention_probabilities<C>(q, k, a, scores, p);
    // dP = dO V^T into the scores' memory; dS = P (dP - rowsum(dP P)) * scale
    product(dout.data(), t, v.data(), t, scores, st, scores_product(a), "attention dP");
    const C scale = C(a.scale);
    kernels::softmax_grad_kernel<C>
        <<<static_cast<unsigned>(a.products * a.rows), kernels::row_threads, 0, stream()>>>(
            kernels::ref{p, t}, kernels::ref{scores, st}, kernels::mut_ref{ds, t}, a.seq, a.seq, true, scale);
    // dQ = dS K; dK = dS^T Q; dV = P^T dO (the transposes sum over the group's query heads)
    product(ds, t, k.data(), t, dq, t, times_values_product(a), "attention dQ");
    product(ds, t, q.data(), t, dk, t, transposed_product(a), "attention dK");
    product(p, t, dout.data(), t, dv, t, transposed_product(a), "attention dV");
  }

  // dq, dk and dv of an attention gradient call's operands into the given memory: flash attention
  // where it applies, else the batched products.
  template <class C>
  void attention_gradients(const call_t& c, const attention_shape& a, void* dq, void* dk, void* dv) {
    if (cudnn_applies(c, a)) return cudnn_backward(c, a, dq, dk, dv);
    if (!flash_applies(c, a)) return batched_attention_backward<C>(c, a, dq, dk, dv);
    if (c.in[0]->type() == dtype::bf16) return flash_backward<__nv_bfloat16>(c, a, dq, dk, dv);
    flash_backward<__half>(c, a, dq, dk, dv);
  }

  // dq, dk and dv are made together on the first of the three calls and kept until another op runs;
  // an attention_grad_q call carrying key_grad and value_grad gets all three written in place.
  template <class C>
  void attention_backward(const call_t& c) {
    const attention_shape a = attention_of(c);
    const buffer &q = *c.in[0], &k = *c.in[1], &v = *c.in[2], &dout = *c.in[3];
    const dtype t = q.type();
    for (const buffer* b : {c.in[1], c.in[2], c.in[3], static_cast<const buffer*>(c.out)})
      if (b->type() != t)
        fail("cuda::backend: attention gradient",
             "q, k, v, the output gradient and the result must share a dtype",
             "this is a bug in the executor; please report it");
    if (c.key_grad != nullptr) {
      state_->attention_cache_valid = false;  // nothing kept: the three results are where they belong
      if (c.key_grad->type() != t || c.value_grad->type() != t)
        fail("cuda::backend: attention gradient", "dk and dv must share q's dtype",
             "this is a bug in the executor; please report it");
      return attention_gradients<C>(c, a, c.out->data(), c.key_grad->data(), c.value_grad->data());
    }
    const std::size_t q_bytes = q.size_bytes(), kv_bytes = k.size_bytes();
    const auto dq_scratch = [&] { return state_->scratch.get(scratch_use::attention_dq, q_bytes); };
    void* dk = state_->scratch.get(scratch_use::attention_dk, kv_bytes);
    void* dv = state_->scratch.get(scratch_use::attention_dv, kv_bytes);
    const bool wants_dq = c.kind == op::attention_grad_q;
    const bool cached = state_->attention_cache_valid && state_->attention_inputs[0] == q.data() &&
                        state_->attention_inputs[1] == k.data() && state_->attention_inputs[2] == v.data() &&
                        state_->attention_inputs[3] == dout.data() &&
                        (!wants_dq || state_->attention_dq_cached);
    if (!cached) {
      // The call asking for dq (the first of the three, in the order autodiff emits them) gets it
      // written straight into its output: one copy fewer.
      attention_gradients<C>(c, a, wants_dq ? c.out->data() : dq_scratch(), dk, dv);
      state_->attention_inputs[0] = q.data();
      state_->attention_inputs[1] = k.data();
      state_->attention_inputs[2] = v.data();
      state_->attention_inputs[3] = dout.data();
      state_->attention_cache_valid = true;
      state_->attention_dq_cached = !wants_dq;
      if (wants_dq) return;
    }
    const void* wanted = wants_dq ? dq_scratch() : c.kind == op::attention_grad_k ? dk : dv;
    check_cuda(
        cudaMemcpyAsync(c.out->data(), wanted, c.out->size_bytes(), cudaMemcpyDeviceToDevice, stream()),
        "backend: attention gradient (cudaMemcpyAsync)");
  }

  backend_options options_;
  std::shared_ptr<detail::backend_state> state_;
};

static_assert(compute::TrainingBackend<backend>);

}  // namespace shardgraph::cuda
