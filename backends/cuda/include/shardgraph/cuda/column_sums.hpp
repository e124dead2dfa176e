#pragma once
// Column sums over the rows of a (rows, n) matrix: a bias's gradient (dy's columns) and a norm's
// weight gradient (dy x_hat's columns). Each block sums a split of column_rows_per_split rows into a
// (splits, n) partial in scratch; column_totals then sums the splits: no atomics, the same bits
// every run.
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/norms.cuh>
#include <shardgraph/cuda/kernels/norms_by_warp.cuh>
#include <shardgraph/cuda/scratch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shardgraph::cuda::detail {

// to[j] = sum over the splits of partial (splits, n).
template <class C>
void column_totals(backend_state& s, const C* partial, std::int64_t splits, kernels::mut_ref to,
                   std::int64_t n) {
  const unsigned grid = static_cast<unsigned>((n + kernels::column_block_x - 1) / kernels::column_block_x);
  kernels::column_total_kernel<C>
      <<<grid, dim3(kernels::column_block_x, kernels::column_block_y), 0, s.stream>>>(partial, splits, to, n);
}

// to[j] = sum over rows of source's term (i, j); with `values`, also values[j] = sum of dy's
// column j: in the same pass where the vector kernel takes a normalized_product, else apart.
template <class C>
void column_sums(backend_state& s, kernels::mut_ref to, std::int64_t rows, std::int64_t n, auto source,
                 const kernels::mut_ref* values = nullptr) {
  if (n == 0) return;
  constexpr kernels::column_term term = decltype(source)::term;
  constexpr bool normalized = term == kernels::column_term::normalized_product;
  const std::int64_t splits =
      std::max<std::int64_t>(1, (rows + kernels::column_rows_per_split - 1) / kernels::column_rows_per_split);
  const std::int64_t sums = normalized && values != nullptr ? 2 : 1;  // (splits, n) partials each
  C* partial = s.scratch.get<C>(scratch_use::partials, static_cast<std::size_t>(sums * splits * n));
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
          kernels::column_partial_vector_kernel<T, C, term, AlsoValues><<<vector_grid, block, 0, s.stream>>>(
              static_cast<const T*>(source.dy.data), static_cast<const T*>(source.x.data), source.stats,
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
    if (values_summed) column_totals<C>(s, partial + splits * n, splits, *values, n);
  } else {
    kernels::column_partial_kernel<C><<<grid, block, 0, s.stream>>>(source, partial, rows, n);
  }
  column_totals<C>(s, partial, splits, to, n);
  if (values != nullptr && !values_summed)
    column_sums<C>(
        s, *values, rows, n,
        kernels::column_source<C, kernels::column_term::value>{.dy = source.dy, .x = {}, .stats = nullptr});
}

// The sums of dy's columns (rows, n) -> (n): a bias_grad call's, and a linear's bias gradient.
template <class C>
void column_sums_of(backend_state& s, kernels::mut_ref to, std::int64_t rows, std::int64_t n,
                    kernels::ref dy) {
  column_sums<C>(s, to, rows, n,
                 kernels::column_source<C, kernels::column_term::value>{.dy = dy, .x = {}, .stats = nullptr});
}

}  // namespace shardgraph::cuda::detail
