#pragma once
// shardgraph::cuda::backend: the ComputeBackend (and TrainingBackend) on one NVIDIA GPU. The
// executor's kernel calls run on the backend's stream: GEMMs through cuBLASLt (products.hpp,
// gemm.hpp), 16-bit causal attention on cuDNN's fused flash attention where the build has cuDNN and
// the shape suits it, else with head_dim 64 on the own flash attention kernels (fused_attention.hpp),
// other attention as batched GEMMs around a causal softmax (attention_calls.hpp), and the rest as
// the kernels of kernels/ (norm_calls.hpp, elementwise_calls.hpp, embedding_calls.hpp,
// loss_calls.hpp; the optimizer's in optimizer_calls.hpp). It computes what the cpu backend
// computes (the reference) in f64, f32, bf16 and f16: 16-bit values are read into f32, computed in
// f32 and rounded once; an f64 call computes in f64. Exceptions, in 16-bit attention: flash
// attention (cuDNN's and the own) rounds P and dS to the inputs' dtype before their products (as
// FlashAttention does); the batched-GEMM path rounds its scores, probabilities and their gradients
// between its products (as PyTorch's unfused attention under autocast does).
//
//   world.run([&](auto& comm) {
//     auto rank = sg::bind(program, sizes, comm, sg::cuda::backend{}, mesh, weights);   // in a .cu file
//   });
//
// Include it from a file compiled by nvcc (its kernels are in the headers). Buffers are device
// memory; backend{{.host_visible = true}} makes them managed memory, for host-side communicators
// (threads: several ranks on one GPU). Work is asynchronous on the stream; the executor calls
// synchronize() before each collective, and download, sum_of_squares and all_finite wait for it.
// The class holds the options and the shared backend_state (backend_state.hpp) and picks, per
// call, the launch functions of the headers above, which take that state.
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/compute/lower_fused.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/along_dimension_calls.hpp>
#include <shardgraph/cuda/attention_calls.hpp>
#include <shardgraph/cuda/attention_shape.hpp>
#include <shardgraph/cuda/backend_options.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/cached_attention_calls.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/convolution_calls.hpp>
#if SHARDGRAPH_CUDA_CUDNN
#include <shardgraph/cuda/cudnn_attention.hpp>
#endif
#include <shardgraph/cuda/device_guard.hpp>
#include <shardgraph/cuda/elementwise_calls.hpp>
#include <shardgraph/cuda/embedding_calls.hpp>
#include <shardgraph/cuda/fused_attention.hpp>
#include <shardgraph/cuda/gemm.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/loss_calls.hpp>
#include <shardgraph/cuda/memory_moves.hpp>
#include <shardgraph/cuda/norm_calls.hpp>
#include <shardgraph/cuda/optimizer_calls.hpp>
#include <shardgraph/cuda/products.hpp>
#include <shardgraph/cuda/stream_recording.hpp>
#include <shardgraph/cuda/tensor_buffer.hpp>
#include <shardgraph/cuda/text.hpp>
#include <shardgraph/cuda/vocab_parallel_loss_calls.hpp>
#include <shardgraph/ir/op.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardgraph::cuda {

class backend {
 public:
  using buffer = tensor_buffer;
  // Every fused kind (compute/fused_kinds.hpp): a linear's bias and epilogue (GELU keeping its
  // input, GELU's gradient, a residual add) in cuBLASLt's epilogue where it has one, else by the
  // elementwise kernel after the GEMM; a weight gradient's bias gradient summed in the GEMM's
  // epilogue; a norm's weight, bias and input gradients in one pass where the rows fit the warp
  // kernels (and the add after it as it writes); a tied table's gradient sum in the row kernel; flash
  // or cuDNN attention reading and writing the products' (batch, seq, heads, head_dim) rows in place,
  // its forward saving its log-sum-exp for the backward, which writes dq, dk and dv at once; the
  // loss and its gradient in one read of each row (or the gradient reading the loss's saved
  // log-sum-exp); q's, k's and v's products as one strided batched GEMM. A call a kernel does not
  // take runs as its parts (compute/lower_fused.hpp's split functions).
  struct traits {
    static constexpr std::string_view name = "cuda";  // custom ops' kernels for it: {"cuda", &fn}
    static constexpr compute::fused_set runs = compute::fused_set::all();
  };
  // Where a buffer's memory starts: the core finds a batched call's strides by it.
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
  void copy(const buffer& from, buffer& to) { detail::copy(*state_, from, to); }
  // The memory a communicator writes: the attention gradients kept for the next call may be stale.
  void* data(buffer& b) {
    return b.data();
  }

  // Waits for the stream, then reports what its kernels found (a target outside the vocabulary).
  void synchronize() {
    check_cuda(cudaStreamSynchronize(stream()), "backend: a kernel failed (cudaStreamSynchronize)");
    int bad = 0;
    check_cuda(cudaMemcpy(&bad, state_->bad_target(), sizeof bad, cudaMemcpyDeviceToHost), "backend (flags)");
    if (bad != 0) {
      check_cuda(cudaMemset(state_->bad_target(), 0, sizeof bad), "backend (flags)");
      if (bad == kernels::vocab_loss_overflow)
        fail("cuda::backend: cross_entropy",
             "a row's log-sum-exp over the vocabulary-sharded logits overflowed: the ranks' slices differ by more "
             "than the dtype's exponent range",
             "check the logits for diverging values, or compute the loss in f64");
      fail("cuda::backend: cross_entropy", "a target id is outside the vocabulary",
           "check the token ids against the model's vocab_size, or mark ignored rows with the ignore index");
    }
  }

  cudaStream_t stream() const { return state_->stream; }
  // The stream a custom op's kernel launches on (compute/custom_call.hpp: custom_call::stream).
  void* stream_handle() const { return stream(); }
  int device() const { return state_->device; }
  // Bytes held by the values this backend allocated (now, and at most), and by its scratch.
  std::size_t bytes_in_use() const { return state_->ledger->in_use; }
  std::size_t peak_bytes() const { return state_->ledger->peak; }
  std::size_t scratch_bytes() const { return state_->scratch.bytes(); }

  // Block moves: (outer, parts*mid, inner) <-> [parts][outer][mid][inner] (memory_moves.hpp)
  void deinterleave(const buffer& from, buffer& to, compute::block_layout l) {
    detail::move_blocks(*state_, from, to, l, false);
  }
  void interleave(const buffer& from, buffer& to, compute::block_layout l) {
    detail::move_blocks(*state_, from, to, l, true);
  }
  void slice(const buffer& from, buffer& to, compute::block_layout l, std::int64_t index) {
    detail::slice(*state_, from, to, l, index);
  }

  // The optimizer's work (compute::TrainingBackend; optimizer_calls.hpp).
  double sum_of_squares(const buffer& b) {
    const buffer* one = &b;
    return sum_of_squares(std::span<const buffer* const>(&one, 1));
  }
  // The sum over several buffers with one wait for the GPU (the trainer's gradient norm).
  double sum_of_squares(std::span<const buffer* const> buffers) {
    double sum = 0;
    detail::queue_sum_of_squares(*state_, buffers, &sum);
    synchronize();
    return sum;
  }
  void scale(buffer& b, double factor) { detail::axpby(*state_, b, b, 0, factor, "scale"); }
  void add_scaled(const buffer& from, buffer& to, double factor) {
    if (from.numel() != to.numel())
      fail("cuda::backend::add_scaled", "buffers of different size",
           "this is a bug in the trainer; please report it");
    detail::axpby(*state_, from, to, 1, factor, "add_scaled");
  }
  void convert(const buffer& from, buffer& to) {
    if (from.numel() != to.numel())
      fail("cuda::backend::convert", "buffers of different size",
           "this is a bug in the trainer; please report it");
    if (from.type() == to.type()) return copy(from, to);
    detail::axpby(*state_, from, to, 0, 1, "convert");
  }
  void fill_zero(buffer& b) { detail::fill_zero(*state_, b); }
  bool all_finite(const buffer& b) {
    int bad = 0;
    if (b.numel() == 0) return true;
    detail::queue_nonfinite_count(*state_, b, &bad);
    synchronize();
    return bad == 0;
  }
  void copy_range(const buffer& from, std::int64_t from_offset, buffer& to, std::int64_t to_offset,
                  std::int64_t count) {
    detail::copy_range(*state_, from, from_offset, to, to_offset, count);
  }
  // The per-step constants of AdamW, after checking the buffers agree.
  // grad may be of another floating dtype when `grad_any_dtype` (adamw_many widens it as it reads).
  static kernels::adamw_scalars adamw_scalars_for(const buffer& param, const buffer& grad, const buffer& m,
                                                  const buffer& v, const compute::adamw_arguments& a,
                                                  bool grad_any_dtype = false) {
    return detail::adamw_scalars_for(param, grad, m, v, a, grad_any_dtype);
  }
  // Every update in one launch (compute::adamw_update): the trainer's step without ZeRO.
  void adamw_many(std::span<const compute::adamw_update<buffer>> updates) {
    detail::adamw_many(*state_, updates);
  }
  void adamw(buffer& param, const buffer& grad, buffer& m, buffer& v, const compute::adamw_arguments& a) {
    detail::adamw(*state_, param, grad, m, v, a);
  }

  // One kernel (or GEMM) per call, as the executor describes it (compute/compute_backend.hpp).
  void run(const compute::kernel_call<buffer>& call) {
    if (call.batch > 1 && !detail::batch_fits(call)) return run_batch_apart(call);
    if (call.token_major && !fused_attention_applies(call)) return run_token_major_apart(call);
    if (call.weight_grad != nullptr && !detail::norm_gradients_fit(call)) {
      const auto apart = compute::split_norm_gradients(call);
      run(apart.input_grad);
      return run(apart.weight_grad);
    }
    if (call.bias_grad != nullptr && call.weight_grad == nullptr && !detail::bias_grad_epilogue_fits(call)) {
      const auto apart = compute::split_bias_grad(call);
      run(apart.product);
      return run(apart.bias_grad);
    }
    const detail::op_timer timer(*state_, op_name(call.kind), call.out->type());
    // 32-bit indices where every buffer of the call has fewer than 2^31 elements.
    if (detail::uses_f64(call))
      detail::large(call) ? run_typed<double, std::int64_t>(call) : run_typed<double, std::uint32_t>(call);
    else
      detail::large(call) ? run_typed<float, std::int64_t>(call) : run_typed<float, std::uint32_t>(call);
    detail::launched(op_name(call.kind));
  }

 private:
  using call_t = compute::kernel_call<buffer>;

  // A batched call's products one at a time.
  void run_batch_apart(const call_t& c) {
    std::array<buffer, 3> views;
    for (std::int64_t b = 0; b < c.batch; ++b) run(compute::batch_member(c, b, views));
  }

  bool fused_attention_applies(const call_t& c) const {
    const detail::attention_shape a = detail::attention_of(c);
    return detail::cudnn_applies(*state_, c, a) || detail::flash_applies(c, a);
  }

  // A token-major attention call that fused attention does not take (f32, f64, another head_dim):
  // on head-major copies of its operands (compute::run_token_major_apart), in one scratch buffer.
  // It saves no statistics: its backward runs the batched products again.
  void run_token_major_apart(const call_t& call) {
    std::int64_t numel = call.out->numel();
    for (const buffer* b : {call.in[0], call.in[1], call.in[2], call.in[3], static_cast<const buffer*>(call.key_grad),
                            static_cast<const buffer*>(call.value_grad)})
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

  // A product (or a row sum) over an empty dimension: zero, as on the cpu.
  static bool empty_sum(const call_t& c) {
    const std::int64_t* d = c.dims;
    const bool product_op = c.kind == op::linear || c.kind == op::matmul || c.kind == op::linear_weight_grad;
    const bool row_op =
        c.kind == op::layer_norm_grad_w || c.kind == op::rms_norm_grad_w || c.kind == op::bias_grad;
    return (product_op && (d[0] == 0 || d[1] == 0 || d[2] == 0 || (c.kind == op::matmul && d[3] == 0))) ||
           (row_op && d[0] == 0);
  }

  // The call with compute type C (float, or double for f64) and index type I, by its op.
  template <class C, class I>
  void run_typed(const call_t& c) {
    if (c.out->numel() == 0) return;
    if (empty_sum(c)) return fill_zero(*c.out);
    detail::backend_state& s = *state_;
    if (is_along_dimension(c.kind)) return detail::along_dimension<C, I>(s, c);
    switch (c.kind) {
      case op::embedding:
        return detail::embedding<C, I>(s, c);
      case op::position_embedding:
        return detail::position_embedding<C, I>(s, c);
      case op::cached_attention:
        return detail::cached_attention<C, I>(s, c);
      case op::linear:
        if (c.epilogue == compute::product_epilogue::none) return detail::linear<C, I>(s, c);
        if (!detail::linear_epilogue_in_product(s, c)) run_epilogue_apart<C, I>(c);
        return;
      case op::matmul:
        return detail::matmul(s, c);
      case op::layer_norm:
        return detail::norm<C, true>(s, c);
      case op::rms_norm:
        return detail::norm<C, false>(s, c);
      case op::softmax:
        return detail::softmax<C>(s, c);
      case op::rope:
      case op::rope_grad:
        return detail::rope<C, I>(s, c);
      case op::split_heads:
        return detail::heads<C, true, I>(s, c);
      case op::merge_heads:
        return detail::heads<C, false, I>(s, c);
      case op::attention:
        return detail::attention_forward<C>(s, c);
      case op::attention_grad_q:
      case op::attention_grad_k:
      case op::attention_grad_v:
        return detail::attention_backward<C>(s, c);
      case op::cross_entropy:
        if (c.in[2] != nullptr) return detail::vocab_parallel_call<C>(s, c);  // (logits, targets, lse, stats)
        return detail::cross_entropy<C>(s, c);
      case op::cross_entropy_grad:
        if (c.in[3] != nullptr) return detail::vocab_parallel_call<C>(s, c);  // (logits, targets, dloss, lse)
        return detail::cross_entropy_grad<C>(s, c);
      case op::vocab_statistics:
      case op::vocab_exp_sum:
      case op::vocab_log_sum_exp:
        return detail::vocab_parallel_call<C>(s, c);
      case op::add:
      case op::mul:
      case op::add_bias:
      case op::gelu:
      case op::silu:
      case op::relu:
      case op::gelu_erf:
      case op::quick_gelu:
        return detail::elementwise_chain<C, I>(s, c);
      case op::transpose:
        return detail::transpose<C, I>(s, c);
      case op::permute:
        return detail::permute<C, I>(s, c);
      case op::patchify:
      case op::unpatchify:
        return detail::patch_layout<C, I>(s, c);
      case op::unfold1d:
      case op::fold1d:
        return detail::window_layout<C, I>(s, c);
      case op::dropout:
        return detail::dropout<C, I>(s, c);
      default:
        return run_gradient<C, I>(c);
    }
  }

  // run_typed's gradient ops (and `ones`, the loss gradient's seed).
  template <class C, class I>
  void run_gradient(const call_t& c) {
    detail::backend_state& s = *state_;
    switch (c.kind) {
      case op::linear_weight_grad:
        return detail::linear_weight_grad<C>(s, c, options_.bias_grad_in_product);
      case op::bias_grad:
        return detail::column_sums_of<C>(s, detail::out(*c.out), c.dims[0], c.dims[1], detail::in(c, 0));
      case op::position_embedding_grad:
        return detail::position_embedding_grad<C, I>(s, c);
      case op::gelu_grad:
        return detail::activation_grad<C, op::gelu_grad, I>(s, c);
      case op::silu_grad:
        return detail::activation_grad<C, op::silu_grad, I>(s, c);
      case op::relu_grad:
        return detail::activation_grad<C, op::relu_grad, I>(s, c);
      case op::gelu_erf_grad:
        return detail::activation_grad<C, op::gelu_erf_grad, I>(s, c);
      case op::quick_gelu_grad:
        return detail::activation_grad<C, op::quick_gelu_grad, I>(s, c);
      case op::layer_norm_grad_x:
        return run_norm_input_grad<C, true>(c);
      case op::rms_norm_grad_x:
        return run_norm_input_grad<C, false>(c);
      case op::layer_norm_grad_w:
      case op::rms_norm_grad_w:
        return detail::norm_weight_grad<C>(s, c);
      case op::softmax_grad:
        return detail::softmax_grad<C>(s, c);
      case op::embedding_grad:
        return detail::embedding_grad<C, I>(s, c);
      case op::ones:
        return detail::ones<C, I>(s, c);
      default:
        fail("cuda::backend", detail::text("op ", op_name(c.kind), " has no cuda kernel"),
             "this is a bug in the executor; please report it");
    }
  }

  // A linear whose epilogue cuBLASLt does not take here: the product, then the elementwise kernel
  // it stands for (compute::split_epilogue).
  template <class C, class I>
  void run_epilogue_apart(const call_t& c) {
    const auto apart = compute::split_epilogue(c);
    run_typed<C, I>(apart.product);
    run_typed<C, I>(apart.elementwise);
  }

  // A norm's input gradient; one adding its epilogue's addend where the warp kernels do not take
  // the rows runs as the block-per-row kernels, then the add.
  template <class C, bool Layer>
  void run_norm_input_grad(const call_t& c) {
    if (detail::norm_input_grad<C, Layer>(*state_, c)) return;
    const auto apart = compute::split_epilogue(c);
    detail::norm_input_grad<C, Layer>(*state_, apart.product);
    run_typed<C, std::int64_t>(apart.elementwise);
  }

  backend_options options_;
  std::shared_ptr<detail::backend_state> state_;
};

static_assert(compute::TrainingBackend<backend>);

}  // namespace shardgraph::cuda
