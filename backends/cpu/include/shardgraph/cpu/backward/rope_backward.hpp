#pragma once
// Gradient of rope (rope.hpp). rope rotates each pair (i, i + head_dim/2) by angle(p, i), an
// orthogonal map, so its transpose, which carries the gradient back, is the rotation by -angle:
//   dx[i]              = dy[i] cos(angle) + dy[i + head_dim/2] sin(angle)
//   dx[i + head_dim/2] = dy[i + head_dim/2] cos(angle) - dy[i] sin(angle)
// The angles are those of rope(), computed in double and rounded to T once.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

// dx (batch, heads, seq, head_dim): on entry the gradient of rope's output, on return that of its
// input (in place). theta and position_offset must be those of the forward rope call.
template <class T>
void rope_backward(T* dx, std::int64_t batch, std::int64_t heads, std::int64_t seq, std::int64_t head_dim,
                   double theta, std::int64_t position_offset = 0) {
  constexpr auto where = "cpu::rope_backward";
  detail::check_size(where, "batch", batch);
  detail::check_size(where, "heads", heads);
  detail::check_size(where, "seq", seq);
  detail::check_size(where, "head_dim", head_dim);
  detail::check_size(where, "position_offset", position_offset);
  if (head_dim % 2 != 0) {
    fail(where,
         "head_dim " + std::to_string(head_dim) +
             " is odd, but rotate-half pairs element i with i + head_dim/2",
         "use an even head_dim");
  }
  if (!(theta > 0)) fail(where, "theta is not positive", "pass the model's rope_theta, e.g. 10000");
  detail::check_pointer(where, "dx", dx, batch * heads * seq * head_dim);

  const std::int64_t half = head_dim / 2;
  // (seq, half) tables, shared by every (batch, head).
  std::vector<T> cosines(static_cast<std::size_t>(seq * half));
  std::vector<T> sines(cosines.size());
  for (std::int64_t t = 0; t < seq; ++t) {
    const double position = double(position_offset + t);
    for (std::int64_t i = 0; i < half; ++i) {
      const double inverse_frequency = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
      const double angle = position * inverse_frequency;
      cosines[static_cast<std::size_t>(t * half + i)] = T(std::cos(angle));
      sines[static_cast<std::size_t>(t * half + i)] = T(std::sin(angle));
    }
  }

  for (std::int64_t row = 0; row < batch * heads * seq; ++row) {
    const std::int64_t t = row % seq;
    T* first = dx + row * head_dim;  // dx[..., :half]
    T* second = first + half;        // dx[..., half:]
    const T* c = cosines.data() + t * half;
    const T* s = sines.data() + t * half;
    for (std::int64_t i = 0; i < half; ++i) {
      const T g1 = first[i];
      const T g2 = second[i];
      first[i] = g1 * c[i] + g2 * s[i];
      second[i] = g2 * c[i] - g1 * s[i];
    }
  }
}

}  // namespace shardgraph::cpu
