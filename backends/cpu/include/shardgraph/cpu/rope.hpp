#pragma once
// Rotary position embedding, rotate-half convention exactly as HF LLaMA (apply_rotary_pos_emb with
// rotate_half): the pairs are (i, i + head_dim/2), not adjacent elements.
//   angle(p, i) = p * inverse_frequency[i],   i in [0, head_dim/2)
//   out[i]              = a * (x[i] cos(angle) - x[i + head_dim/2] sin(angle))
//   out[i + head_dim/2] = a * (x[i + head_dim/2] cos(angle) + x[i] sin(angle))
// The inverse frequencies and the factor a come from a compute::rope_frequencies table (HF's RoPE
// scaling kinds; unscaled: inverse_frequency[i] = 1 / theta^(2i / head_dim), a = 1). Angles,
// cosines and sines are computed in double and rounded to T once (HF computes them in f32; the
// difference is within f32 tolerance for the positions of these models).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "shardgraph/compute/rope_frequencies.hpp"
#include "shardgraph/cpu/checks.hpp"

namespace shardgraph::cpu {

namespace detail {

// Rotates each pair (i, i + head_dim/2) of x (batch, heads, seq, head_dim) in place by
// direction * angle(position, i) and scales it by the table's factor; direction -1 is the
// transpose (rope's gradient). `where` and `name` label errors.
template <class T>
void rotate_half(T* x, std::int64_t batch, std::int64_t heads, std::int64_t seq, std::int64_t head_dim,
                 const compute::rope_frequencies& table, std::int64_t position_offset, double direction,
                 const char* where, const char* name) {
  check_size(where, "batch", batch);
  check_size(where, "heads", heads);
  check_size(where, "seq", seq);
  check_size(where, "head_dim", head_dim);
  check_size(where, "position_offset", position_offset);
  if (head_dim % 2 != 0) {
    fail(where,
         "head_dim " + std::to_string(head_dim) +
             " is odd, but rotate-half pairs element i with i + head_dim/2",
         "use an even head_dim");
  }
  if (table.pairs != head_dim / 2)
    fail(where,
         "the frequency table has " + std::to_string(table.pairs) + " pairs for a head_dim of " +
             std::to_string(head_dim),
         "make the table with compute::make_rope_frequencies for this head_dim");
  check_pointer(where, name, x, batch * heads * seq * head_dim);

  const std::int64_t half = head_dim / 2;
  // (seq, half) tables, shared by every (batch, head).
  std::vector<T> cosines(static_cast<std::size_t>(seq * half));
  std::vector<T> sines(cosines.size());
  for (std::int64_t t = 0; t < seq; ++t) {
    const double position = double(position_offset + t);
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = position * table.inverse_frequency[i];
      cosines[static_cast<std::size_t>(t * half + i)] = T(table.attention_factor * std::cos(angle));
      sines[static_cast<std::size_t>(t * half + i)] = T(direction * table.attention_factor * std::sin(angle));
    }
  }

  for (std::int64_t row = 0; row < batch * heads * seq; ++row) {
    const std::int64_t t = row % seq;
    T* first = x + row * head_dim;  // x[..., :half]
    T* second = first + half;       // x[..., half:]
    const T* c = cosines.data() + t * half;
    const T* s = sines.data() + t * half;
    for (std::int64_t i = 0; i < half; ++i) {
      const T x1 = first[i];
      const T x2 = second[i];
      first[i] = x1 * c[i] - x2 * s[i];
      second[i] = x2 * c[i] + x1 * s[i];
    }
  }
}

// The unscaled table of `theta`; errors name `where`.
inline compute::rope_frequencies standard_table(std::int64_t head_dim, double theta, const char* where) {
  if (head_dim % 2 != 0)
    fail(where, "head_dim " + std::to_string(head_dim) + " is odd, but rotate-half pairs element i with i + head_dim/2",
         "use an even head_dim");
  if (!(theta > 0)) fail(where, "theta is not positive", "pass the model's rope_theta, e.g. 10000");
  return compute::make_rope_frequencies({.theta = theta}, head_dim, 0, where);
}

}  // namespace detail

// x (batch, heads, seq, head_dim), rotated in place by `table` (compute::make_rope_frequencies);
// token t sits at position position_offset + t (position_offset > 0 when decoding after a KV
// cache, or for a sequence-parallel shard).
template <class T>
void rope(T* x, std::int64_t batch, std::int64_t heads, std::int64_t seq, std::int64_t head_dim,
          const compute::rope_frequencies& table, std::int64_t position_offset = 0) {
  detail::rotate_half(x, batch, heads, seq, head_dim, table, position_offset, 1.0, "cpu::rope", "x");
}

// Unscaled rope with base `theta`.
template <class T>
void rope(T* x, std::int64_t batch, std::int64_t heads, std::int64_t seq, std::int64_t head_dim, double theta,
          std::int64_t position_offset = 0) {
  rope(x, batch, heads, seq, head_dim, detail::standard_table(head_dim, theta, "cpu::rope"), position_offset);
}

}  // namespace shardgraph::cpu
