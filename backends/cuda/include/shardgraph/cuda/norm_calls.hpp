#pragma once
// The layer and RMS norms of cuda::backend's calls and their gradients: rows of whole vectors, at
// most 256 of them, take a warp each (kernels/norms_by_warp.cuh); other rows a block each
// (kernels/norms.cuh).
//
//   layer_norm / rms_norm        {rows, cols}  x (rows, cols), w (cols) [, b (cols)] -> (rows, cols)
//   *_norm_grad_x                {rows, cols}  x, w, dy -> dx (rows, cols) [+ dw, db: norm_gradients]
//   *_norm_grad_w                {rows, cols}  x, dy -> dw (cols) [+ db (cols)]
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/compute/lower_fused.hpp>
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/column_sums.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/norms.cuh>
#include <shardgraph/cuda/kernels/norms_by_warp.cuh>
#include <shardgraph/cuda/scratch.hpp>
#include <shardgraph/cuda/tensor_buffer.hpp>
#include <shardgraph/ir/op.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace shardgraph::cuda::detail {

// A norm's input gradient with its weight (and bias) gradient that norm_gradients takes in one
// pass: every buffer of one floating dtype, on 16 bytes, rows of whole vectors, at most
// gradient_vectors_per_lane a lane.
inline bool norm_gradients_fit(const kernel_call& c) {
  const dtype t = c.out->type();
  if (c.dims[0] == 0 || c.dims[1] == 0 ||
      c.dims[1] / vector_lanes(t) > kernels::gradient_vectors_per_lane * 32)
    return false;
  const tensor_buffer* addend = c.epilogue == compute::product_epilogue::add ? c.side : c.out;
  const tensor_buffer* bias = c.bias_grad != nullptr ? c.bias_grad : c.out;
  return vector_ready(t, c.dims[1],
                      {in(c, 0), in(c, 1), in(c, 2), in(*c.out), in(*addend), in(*c.weight_grad), in(*bias)});
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
void norm(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  if (run_by_warp(o.type(), d[0], d[1], {in(c, 0), in(c, 1), Layer ? in(c, 2) : in(c, 1), in(o)},
                  [&]<class T, class V, int K>(unsigned grid) {
                    kernels::norm_warp_kernel<T, V, K, Layer><<<grid, 256, 0, s.stream>>>(
                        typed<T>(*c.in[0]), typed<T>(*c.in[1]), Layer ? typed<T>(*c.in[2]) : nullptr,
                        static_cast<T*>(o.data()), d[0], static_cast<int>(d[1]), c.scalar);
                  }))
    return;
  if constexpr (Layer)
    kernels::layer_norm_kernel<C><<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, s.stream>>>(
        in(c, 0), in(c, 1), in(c, 2), out(o), d[1], c.scalar);
  else
    kernels::rms_norm_kernel<C><<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, s.stream>>>(
        in(c, 0), in(c, 1), out(o), d[1], c.scalar);
}

// dx, dw (and db) in one pass (norm_gradients_warp_kernel, as many blocks as fit the GPU at
// once), then the column totals of the blocks' partial sums; the caller checked norm_gradients_fit.
template <class C, bool Layer>
void norm_gradients(backend_state& s, const kernel_call& c) {
  const std::int64_t rows = c.dims[0], cols = c.dims[1];
  const bool bias = c.bias_grad != nullptr;
  const tensor_buffer* addend = c.epilogue == compute::product_epilogue::add ? c.side : nullptr;
  with_vector_types(c.out->type(), [&]<class T, class V>() {
    if constexpr (std::is_same_v<V, C>) {
      const std::int64_t vectors_per_lane = (cols / kernels::lanes<T> + 31) / 32;
      const auto launch = [&]<int Vectors, bool Bias>() {
        const auto kernel = kernels::norm_gradients_warp_kernel<T, C, Vectors, Layer, Bias>;
        constexpr std::size_t shared = kernels::norm_gradients_shared_bytes<T, C, Vectors, Bias>;
        const std::int64_t blocks =
            std::min(resident_blocks(s, kernel, shared),
                     (rows + kernels::warp_rows_per_block - 1) / kernels::warp_rows_per_block);
        C* partial =
            s.scratch.get<C>(scratch_use::partials, static_cast<std::size_t>((Bias ? 2 : 1) * blocks * cols));
        kernel<<<static_cast<unsigned>(blocks), 256, shared, s.stream>>>(
            typed<T>(*c.in[0]), typed<T>(*c.in[1]), typed<T>(*c.in[2]), addend ? typed<T>(*addend) : nullptr,
            static_cast<T*>(c.out->data()), partial, rows, static_cast<int>(cols), c.scalar);
        column_totals<C>(s, partial, blocks, out(*c.weight_grad), cols);
        if (Bias) column_totals<C>(s, partial + blocks * cols, blocks, out(*c.bias_grad), cols);
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

// x, w, dy -> dx, and with kernel_call::weight_grad the weight (and bias) gradient too. False
// (nothing run): the call adds its epilogue's addend, which the block-per-row kernels do not; the
// caller runs the gradient (compute::split_epilogue's product), then the add.
template <class C, bool Layer>
bool norm_input_grad(backend_state& s, const kernel_call& c) {
  if (c.weight_grad != nullptr) {
    norm_gradients<C, Layer>(s, c);
    return true;
  }
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  const tensor_buffer* addend = c.epilogue == compute::product_epilogue::add ? c.side : nullptr;
  if (run_by_warp(o.type(), d[0], d[1], {in(c, 0), in(c, 1), in(c, 2), in(o), addend ? in(*addend) : in(o)},
                  [&]<class T, class V, int K>(unsigned grid) {
                    kernels::norm_grad_x_warp_kernel<T, V, K, Layer><<<grid, 256, 0, s.stream>>>(
                        typed<T>(*c.in[0]), typed<T>(*c.in[1]), typed<T>(*c.in[2]),
                        addend ? typed<T>(*addend) : nullptr, static_cast<T*>(o.data()), d[0],
                        static_cast<int>(d[1]), c.scalar);
                  }))
    return true;
  if (addend != nullptr) return false;
  if constexpr (Layer)
    kernels::layer_norm_grad_x_kernel<C><<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, s.stream>>>(
        in(c, 0), in(c, 1), in(c, 2), out(o), d[1], c.scalar);
  else
    kernels::rms_norm_grad_x_kernel<C><<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, s.stream>>>(
        in(c, 0), in(c, 1), in(c, 2), out(o), d[1], c.scalar);
  return true;
}

// stats (rows, 2) of x (in 0) for the weight gradient.
template <class C, bool Layer>
void norm_statistics(backend_state& s, const kernel_call& c, C* stats) {
  const std::int64_t* d = c.dims;
  if (run_by_warp(c.in[0]->type(), d[0], d[1], {in(c, 0)}, [&]<class T, class V, int K>(unsigned grid) {
        if constexpr (std::is_same_v<V, C>)
          kernels::norm_statistics_warp_kernel<T, V, K, Layer>
              <<<grid, 256, 0, s.stream>>>(typed<T>(*c.in[0]), stats, d[0], static_cast<int>(d[1]), c.scalar);
        else
          kernels::norm_statistics_kernel<C, Layer>
              <<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, s.stream>>>(in(c, 0), stats, d[1],
                                                                                   c.scalar);
      }))
    return;
  kernels::norm_statistics_kernel<C, Layer>
      <<<static_cast<unsigned>(d[0]), kernels::row_threads, 0, s.stream>>>(in(c, 0), stats, d[1], c.scalar);
}

// layer_norm_grad_w / rms_norm_grad_w: x (rows, cols), dy (rows, cols): dw[j] = sum_i dy x_hat, and
// with kernel_call::bias_grad (a layer norm's) dy's column sums in the same pass.
template <class C>
void norm_weight_grad(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  C* stats = s.scratch.get<C>(scratch_use::row_statistics, static_cast<std::size_t>(2 * d[0]));
  if (c.kind == op::layer_norm_grad_w)
    norm_statistics<C, true>(s, c, stats);
  else
    norm_statistics<C, false>(s, c, stats);
  const kernels::mut_ref bias_sums = c.bias_grad != nullptr ? out(*c.bias_grad) : kernels::mut_ref{};
  column_sums<C>(s, out(*c.out), d[0], d[1],
                 kernels::column_source<C, kernels::column_term::normalized_product>{
                     .dy = in(c, 1), .x = in(c, 0), .stats = stats},
                 c.bias_grad != nullptr ? &bias_sums : nullptr);
}

}  // namespace shardgraph::cuda::detail
