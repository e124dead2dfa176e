#pragma once
// Dropout (op::dropout, compute/dropout_mask.hpp): out = x / (1 - p) where the mask keeps an
// element, 0 where it drops it; x when the run is not active. Its gradient is the same call on dy.
#include <cstdint>

#include "shardgraph/compute/dropout_mask.hpp"
#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

// x, out: the local block (dims[0], dims[1], dims[2], dims[3]) of the whole tensor m describes.
template <class T>
void dropout(const T* x, T* out, const std::int64_t dims[4], double p, const compute::dropout_mask& m) {
  const std::int64_t numel = dims[0] * dims[1] * dims[2] * dims[3];
  detail::check_pointer("cpu::dropout", "x", x, numel);
  detail::check_pointer("cpu::dropout", "out", out, numel);
  if (!m.run.active || p == 0.0) {
    for (std::int64_t i = 0; i < numel; ++i) out[i] = x[i];
    return;
  }
  const std::uint64_t stream = compute::dropout_stream(m.seed, m.run.step, m.layer);
  const std::uint64_t threshold = compute::dropout_threshold(p);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  std::int64_t o = 0;
  for (std::int64_t i0 = 0; i0 < dims[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < dims[1]; ++i1)
      for (std::int64_t i2 = 0; i2 < dims[2]; ++i2)
        for (std::int64_t i3 = 0; i3 < dims[3]; ++i3, ++o)
          out[o] = compute::dropout_keeps(stream, compute::dropout_index(m, i0, i1, i2, i3), threshold)
                       ? x[o] * scale
                       : T(0);
}

}  // namespace shardgraph::cpu
