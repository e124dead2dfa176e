#pragma once
// Gradient of rope (rope.hpp). rope rotates each pair (i, i + head_dim/2) by angle(p, i) and
// scales it by the table's factor a, so its transpose, which carries the gradient back, is the
// rotation by -angle scaled by the same a:
//   dx[i]              = a * (dy[i] cos(angle) + dy[i + head_dim/2] sin(angle))
//   dx[i + head_dim/2] = a * (dy[i + head_dim/2] cos(angle) - dy[i] sin(angle))
// The angles are those of rope(), computed in double and rounded to T once.
#include <cstdint>

#include "shardgraph/cpu/rope.hpp"

namespace shardgraph::cpu {

// dx (batch, heads, seq, head_dim): on entry the gradient of rope's output, on return that of its
// input (in place). table and position_offset must be those of the forward rope call.
template <class T>
void rope_backward(T* dx, std::int64_t batch, std::int64_t heads, std::int64_t seq, std::int64_t head_dim,
                   const compute::rope_frequencies& table, std::int64_t position_offset = 0) {
  detail::rotate_half(dx, batch, heads, seq, head_dim, table, position_offset, -1.0, "cpu::rope_backward", "dx");
}

// The gradient of the unscaled rope with base `theta`.
template <class T>
void rope_backward(T* dx, std::int64_t batch, std::int64_t heads, std::int64_t seq, std::int64_t head_dim,
                   double theta, std::int64_t position_offset = 0) {
  rope_backward(dx, batch, heads, seq, head_dim, detail::standard_table(head_dim, theta, "cpu::rope_backward"),
                position_offset);
}

}  // namespace shardgraph::cpu
