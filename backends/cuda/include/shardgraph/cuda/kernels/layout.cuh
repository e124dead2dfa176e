#pragma once
// Data movement and rotary embedding: split_heads / merge_heads, batched transpose, and rope and
// its gradient (rotate-half pairs (i, i + head_dim/2), angles in double rounded once, as
// cpu/rope.hpp).
#include <shardgraph/compute/rope_frequencies.hpp>
#include <shardgraph/cuda/kernels/element_access.cuh>

#include <cuda_runtime.h>

#include <cstdint>

namespace shardgraph::cuda::kernels {

// split: x (batch, seq, heads, head_dim) -> y (batch, heads, seq, head_dim); merge: the inverse.
template <class C, bool Split, class I>
__global__ void heads_kernel(ref x, mut_ref y, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
                             std::int64_t numel) {
  for (I e = global_thread<I>(); e < static_cast<I>(numel); e += grid_threads<I>()) {
    // e indexes the (batch, heads, seq, head_dim) side
    const I D = static_cast<I>(head_dim), S = static_cast<I>(seq), H = static_cast<I>(heads);
    const I d = e % D, t = (e / D) % S, h = (e / (D * S)) % H, b = e / (D * S * H);
    const I other = ((b * S + t) * H + h) * D + d;
    if constexpr (Split)
      store<C>(y, e, load<C>(x, other));
    else
      store<C>(y, other, load<C>(x, e));
  }
}

// out (batch, cols, rows) = in (batch, rows, cols) transposed.
template <class C, class I>
__global__ void transpose_kernel(ref in, mut_ref out, std::int64_t rows, std::int64_t cols,
                                 std::int64_t numel) {
  for (I e = global_thread<I>(); e < static_cast<I>(numel); e += grid_threads<I>()) {
    const I R = static_cast<I>(rows), K = static_cast<I>(cols);
    const I j = e % K, i = (e / K) % R, b = e / (R * K);
    store<C>(out, (b * K + j) * R + i, load<C>(in, e));
  }
}

// out = in permuted (op::permute), up to rank 4: out's dims are out_dims; in_strides[k] is the
// stride in `in` of out's dimension k. One thread per element of out.
struct permute_args {
  std::int64_t out_dims[4];
  std::int64_t in_strides[4];
  std::int64_t numel;
};
template <class C, class I>
__global__ void permute_kernel(ref in, mut_ref out, permute_args a) {
  for (I e = global_thread<I>(); e < static_cast<I>(a.numel); e += grid_threads<I>()) {
    I rest = e, from = 0;
    for (int k = 3; k >= 0; --k) {
      const I n = static_cast<I>(a.out_dims[k]);
      from += (rest % n) * static_cast<I>(a.in_strides[k]);
      rest /= n;
    }
    store<C>(out, e, load<C>(in, from));
  }
}

// The positions of a rope's tokens: token t of a row at t, or, in a generation program, at
// kv_context[b][0] - seq + t (compute/kv_context.hpp; context (batch, width) i32, null: none).
struct token_positions {
  const std::int32_t* context = nullptr;
  std::int64_t width = 0;  // kv_context's columns
  std::int64_t heads = 1;  // rows of x per batch row are heads * seq
};

// out = table.attention_factor * x rotated by direction * angle(p, i), x (batch, heads, seq,
// head_dim); angle(p, i) = p * table.inverse_frequency[i] (compute/rope_frequencies.hpp, made on
// the host at bind, passed by value), p the token's position; one thread per pair.
template <class C, class I>
__global__ void rope_kernel(ref x, mut_ref out, std::int64_t seq, std::int64_t head_dim,
                            const __grid_constant__ compute::rope_frequencies table, double direction,
                            std::int64_t pairs, token_positions positions) {
  const I half = static_cast<I>(head_dim / 2), S = static_cast<I>(seq), D = static_cast<I>(head_dim);
  for (I e = global_thread<I>(); e < static_cast<I>(pairs); e += grid_threads<I>()) {
    const I i = e % half, row = e / half, t = row % S;
    const I b = row / (S * static_cast<I>(positions.heads));
    const std::int64_t p =
        positions.context == nullptr ? t : positions.context[b * static_cast<I>(positions.width)] - seq + t;
    const double angle = static_cast<double>(p) * table.inverse_frequency[i];
    double s, c;
    sincos(angle, &s, &c);
    const C cosine = static_cast<C>(table.attention_factor * c);
    const C sine = static_cast<C>(direction * table.attention_factor * s);
    const I first = row * D + i, second = first + half;
    const C x1 = load<C>(x, first), x2 = load<C>(x, second);
    store<C>(out, first, x1 * cosine - x2 * sine);
    store<C>(out, second, x2 * cosine + x1 * sine);
  }
}

}  // namespace shardgraph::cuda::kernels
