#pragma once
// The optimizer's work of cuda::backend (compute::TrainingBackend): AdamW (one parameter a launch,
// or every parameter in one launch from a table of tasks and chunks), out = alpha out + beta in
// (scale, add_scaled, convert), and the reductions the trainer reads on the host (the sum of
// squares, whether all values are finite), queued here and waited for by the backend.
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/core/dtype.hpp>
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/elementwise.cuh>
#include <shardgraph/cuda/scratch.hpp>
#include <shardgraph/cuda/tensor_buffer.hpp>
#include <shardgraph/cuda/text.hpp>
#include <shardgraph/optim/adamw.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace shardgraph::cuda::detail {

// to = alpha to + beta from, element by element (to's dtype).
inline void axpby(backend_state& s, const tensor_buffer& from, tensor_buffer& to, double alpha, double beta,
                  const char* what) {
  if (to.numel() == 0) return;
  const op_timer timer(s, what, to.type());
  const unsigned blocks = kernels::blocks_for(to.numel());
  if (from.type() == dtype::f64 || to.type() == dtype::f64)
    kernels::axpby_kernel<double, std::int64_t>
        <<<blocks, 256, 0, s.stream>>>(in(from), out(to), to.numel(), alpha, beta);
  else if (to.numel() < (std::int64_t{1} << 31))
    kernels::axpby_kernel<float, std::uint32_t><<<blocks, 256, 0, s.stream>>>(
        in(from), out(to), to.numel(), static_cast<float>(alpha), static_cast<float>(beta));
  else
    kernels::axpby_kernel<float, std::int64_t><<<blocks, 256, 0, s.stream>>>(
        in(from), out(to), to.numel(), static_cast<float>(alpha), static_cast<float>(beta));
  launched(what);
}

// Queues the sum of the squares of every buffer's values into *host (pageable memory: valid once
// the stream is waited for).
inline void queue_sum_of_squares(backend_state& s, std::span<const tensor_buffer* const> buffers,
                                 double* host) {
  check_cuda(cudaMemsetAsync(s.sum(), 0, sizeof(double), s.stream), "backend::sum_of_squares");
  for (const tensor_buffer* b : buffers) {
    if (b->numel() == 0) continue;
    kernels::sum_of_squares_kernel<double>
        <<<std::min(kernels::blocks_for(b->numel()), 1024u), 256, 0, s.stream>>>(in(*b), b->numel(), s.sum());
    launched("sum_of_squares");
  }
  check_cuda(cudaMemcpyAsync(host, s.sum(), sizeof(double), cudaMemcpyDeviceToHost, s.stream),
             "backend::sum_of_squares");
}

// Queues the count of b's non-finite values into *host (nonzero: some), as queue_sum_of_squares.
inline void queue_nonfinite_count(backend_state& s, const tensor_buffer& b, int* host) {
  check_cuda(cudaMemsetAsync(s.nonfinite(), 0, sizeof(int), s.stream), "backend::all_finite");
  kernels::nonfinite_kernel<<<kernels::blocks_for(b.numel()), 256, 0, s.stream>>>(in(b), b.numel(),
                                                                                  s.nonfinite());
  launched("all_finite");
  check_cuda(cudaMemcpyAsync(host, s.nonfinite(), sizeof(int), cudaMemcpyDeviceToHost, s.stream),
             "backend::all_finite");
}

// The per-step constants of AdamW, after checking the buffers agree.
// grad may be of another floating dtype when `grad_any_dtype` (adamw_many widens it as it reads).
inline kernels::adamw_scalars adamw_scalars_for(const tensor_buffer& param, const tensor_buffer& grad,
                                                const tensor_buffer& m, const tensor_buffer& v,
                                                const compute::adamw_arguments& a,
                                                bool grad_any_dtype = false) {
  for (const tensor_buffer* b : std::initializer_list<const tensor_buffer*>{&grad, &m, &v})
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

inline void require_optimizer_dtype(dtype t) {
  if (t != dtype::f32 && t != dtype::f64)
    fail("cuda::backend::adamw", text("the optimizer works on f32 and f64 values, not ", dtype_name(t)),
         "train 16-bit models with f32 master weights (the trainer does so by default)");
}

// adamw_many's table: a task per nonempty update, and a chunk per adamw_chunk_elements of each
// (into the state's vectors, which keep their memory from step to step).
inline void adamw_tables(backend_state& s, std::span<const compute::adamw_update<tensor_buffer>> updates) {
  std::vector<kernels::adamw_task>& tasks = s.adamw_tasks;
  std::vector<kernels::adamw_chunk>& chunks = s.adamw_chunks;
  tasks.clear();
  chunks.clear();
  for (const compute::adamw_update<tensor_buffer>& u : updates) {
    const kernels::adamw_scalars scalars =
        adamw_scalars_for(*u.param, *u.grad, *u.m, *u.v, u.arguments, true);
    require_optimizer_dtype(u.param->type());
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
                     .scalars = scalars,
                     .grad_factor = u.grad_factor});
    for (std::int64_t first = 0; first < n; first += kernels::adamw_chunk_elements)
      chunks.push_back({.task = static_cast<int>(tasks.size() - 1), .first = first});
  }
}

// Every update in one launch (compute::adamw_update): the trainer's step without ZeRO.
inline void adamw_many(backend_state& s, std::span<const compute::adamw_update<tensor_buffer>> updates) {
  adamw_tables(s, updates);
  const std::vector<kernels::adamw_task>& tasks = s.adamw_tasks;
  const std::vector<kernels::adamw_chunk>& chunks = s.adamw_chunks;
  if (chunks.empty()) return;
  const std::size_t task_bytes = tasks.size() * sizeof(kernels::adamw_task);
  void* table =
      s.scratch.get(scratch_use::optimizer_tasks, task_bytes + chunks.size() * sizeof(kernels::adamw_chunk));
  auto* device_chunks = reinterpret_cast<kernels::adamw_chunk*>(static_cast<char*>(table) + task_bytes);
  // From pageable memory: the copies are staged before they return, so the vectors may change after.
  check_cuda(cudaMemcpyAsync(table, tasks.data(), task_bytes, cudaMemcpyHostToDevice, s.stream),
             "backend::adamw_many (cudaMemcpyAsync)");
  check_cuda(cudaMemcpyAsync(device_chunks, chunks.data(), chunks.size() * sizeof(kernels::adamw_chunk),
                             cudaMemcpyHostToDevice, s.stream),
             "backend::adamw_many (cudaMemcpyAsync)");
  const op_timer timer(s, "adamw_many", updates.front().param->type());
  kernels::adamw_many_kernel<<<static_cast<unsigned>(chunks.size()), 256, 0, s.stream>>>(
      static_cast<const kernels::adamw_task*>(table), device_chunks);
  launched("adamw_many");
}

inline void adamw(backend_state& s, tensor_buffer& param, const tensor_buffer& grad, tensor_buffer& m,
                  tensor_buffer& v, const compute::adamw_arguments& a) {
  const kernels::adamw_scalars scalars = adamw_scalars_for(param, grad, m, v, a);
  if (param.numel() == 0) return;
  const op_timer timer(s, "adamw", param.type());
  const unsigned blocks = kernels::blocks_for(param.numel());
  if (param.type() == dtype::f32)
    kernels::adamw_kernel<float><<<blocks, 256, 0, s.stream>>>(
        static_cast<float*>(param.data()), static_cast<const float*>(grad.data()),
        static_cast<float*>(m.data()), static_cast<float*>(v.data()), param.numel(), scalars);
  else if (param.type() == dtype::f64)
    kernels::adamw_kernel<double><<<blocks, 256, 0, s.stream>>>(
        static_cast<double*>(param.data()), static_cast<const double*>(grad.data()),
        static_cast<double*>(m.data()), static_cast<double*>(v.data()), param.numel(), scalars);
  else
    require_optimizer_dtype(param.type());
  launched("adamw");
}

}  // namespace shardgraph::cuda::detail
