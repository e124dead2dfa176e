#pragma once
// dropout_mask: which elements a dropout call keeps. The decision for one element is a pure
// function of the op's seed, the run's step number, the layer (inside a repeat block) and the
// element's index in the WHOLE tensor (row-major over its global shape), so a rank holding any
// block of the tensor draws the same mask for that block as one rank holding all of it, on every
// layout and every backend (G = 0x9E3779B97F4A7C15 and mix64 as in data/splitmix64.hpp):
//
//   stream(seed, step, layer) = mix64(mix64(seed + (step + 1) G) + (layer + 1) G)
//                               layer: 0 outside a repeat block, 1 + the layer's index inside one
//   draw(stream, index)       = mix64(stream + (index + 1) G)
//   keep                 = draw >= threshold(p) = floor(p * 2^64)     (probability 1 - p)
//   out                  = keep ? x / (1 - p) : 0                      (torch's scaling)
//
// The gradient is the same op on dy (a kept element passes dy / (1 - p), a dropped one 0): the
// mask is drawn again, not stored. A call that is not `active` (a forward outside a training
// step: evaluation, inference) copies x.
//
//   kernel_call::dims of op::dropout: {d0, d1, d2, d3} the local block, padded in front with 1s;
//   kernel_call::scalar: p; kernel_call::dropout: the seed, the step and where the block lies.
#include <cstdint>

#if defined(__CUDACC__)
#define SHARDGRAPH_DROPOUT_FUNCTION __host__ __device__ constexpr
#else
#define SHARDGRAPH_DROPOUT_FUNCTION constexpr
#endif

namespace shardgraph::compute {

inline constexpr int dropout_rank = 4;

// The run's part of the mask (runtime: set by the trainer for each forward of a training step).
struct dropout_run {
  bool active = false;     // false: dropout is the identity (evaluation, inference, forward())
  std::uint64_t step = 0;  // the mask's step number: a new mask each training forward
};

// What one dropout call needs beyond its buffers: the node's seed, the run's step, and the local
// block (dims) of the whole tensor: its first global index and the whole tensor's extents per
// dimension, padded in front (offset 0, extent 1) to dropout_rank.
struct dropout_mask {
  std::uint64_t seed = 0;
  dropout_run run;
  std::int64_t layer = 0;  // 0 outside a repeat block; inside one, 1 + the running layer's index
  std::int64_t offset[dropout_rank]{};
  std::int64_t whole[dropout_rank]{1, 1, 1, 1};
};

SHARDGRAPH_DROPOUT_FUNCTION std::uint64_t dropout_mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
SHARDGRAPH_DROPOUT_FUNCTION std::uint64_t dropout_stream(std::uint64_t seed, std::uint64_t step,
                                                         std::int64_t layer) {
  const std::uint64_t of_step = dropout_mix64(seed + (step + 1) * 0x9E3779B97F4A7C15ull);
  return dropout_mix64(of_step + (static_cast<std::uint64_t>(layer) + 1) * 0x9E3779B97F4A7C15ull);
}
// floor(p * 2^64) for p in [0, 1): a draw below it drops its element.
SHARDGRAPH_DROPOUT_FUNCTION std::uint64_t dropout_threshold(double p) {
  const double scaled = p * 18446744073709551616.0;
  return scaled >= 18446744073709551615.0 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(scaled);
}
SHARDGRAPH_DROPOUT_FUNCTION bool dropout_keeps(std::uint64_t stream, std::uint64_t index,
                                               std::uint64_t threshold) {
  return dropout_mix64(stream + (index + 1) * 0x9E3779B97F4A7C15ull) >= threshold;
}
// The whole tensor's row-major index of the local block's element (i0, i1, i2, i3).
SHARDGRAPH_DROPOUT_FUNCTION std::uint64_t dropout_index(const dropout_mask& m, std::int64_t i0,
                                                        std::int64_t i1, std::int64_t i2, std::int64_t i3) {
  const std::int64_t at[dropout_rank]{i0, i1, i2, i3};
  std::int64_t index = 0;
  for (int k = 0; k < dropout_rank; ++k) index = index * m.whole[k] + m.offset[k] + at[k];
  return static_cast<std::uint64_t>(index);
}

static_assert(dropout_mix64(0x9E3779B97F4A7C15ull) == 0xE220A8397B1DCDAFull);  // splitmix64(0).next()
static_assert(dropout_threshold(0.0) == 0 && dropout_threshold(0.5) == 0x8000000000000000ull);

}  // namespace shardgraph::compute

#undef SHARDGRAPH_DROPOUT_FUNCTION
