#pragma once
// The compute backend's kernel contract (compute/compute_backend.hpp) as one test body, run on
// every backend: each op of the table there, given as a compute::kernel_call to backend.run, against
// a naive reference written here in double (triple loops, the formulas of torch and HF, log-sum-exp
// by hand), in f64 and f32. What only one backend does (the cpu kernels' own arguments, the cuda
// backend's fused and 16-bit paths) stays in that backend's file.
//
// Use: include this header, define the fixture types, list them as `kernel_backends` (a
// std::tuple), then include kernel_contract_cases.hpp. A fixture F gives
//   F::backend                    the ComputeBackend type; F::make() one, for a test case
//   F::f64, F::f32                the largest max |got - reference| / max |reference| allowed
// and each case's buffers come from the backend itself (allocate, upload, download).
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/core/dtype.hpp>
#include <shardgraph/core/half_types.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

namespace kernel_contract {

namespace sg = shardgraph;
using sg::dtype;
using sg::op;

inline constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
inline constexpr double infinity = std::numeric_limits<double>::infinity();

// ---- host values ----------------------------------------------------------------------------------

// A tensor on the host: its values as doubles (ids too, which double holds exactly) and the dtype a
// backend stores it in. 16-bit values are rounded once, on upload, so every backend sees the same bits.
struct host_tensor {
  dtype type = dtype::f32;
  std::vector<double> values;
};

// n values in [low, high) from a linear congruential generator: the same sequence on every platform.
inline std::vector<double> random_values(std::int64_t n, std::uint32_t seed, double low = -1,
                                         double high = 1) {
  std::vector<double> values(static_cast<std::size_t>(n));
  std::uint32_t state = seed * 2654435761u + 12345u;
  for (double& v : values) {
    state = state * 1664525u + 1013904223u;
    v = low + (high - low) * static_cast<double>(state >> 8) / 16777216.0;  // 24 random bits
  }
  return values;
}

inline host_tensor random_tensor(dtype type, std::int64_t n, std::uint32_t seed, double low = -1,
                                 double high = 1) {
  return {type, random_values(n, seed, low, high)};
}

inline host_tensor id_tensor(const std::vector<std::int64_t>& ids) {
  return {dtype::i64, std::vector<double>(ids.begin(), ids.end())};
}

// values as the bytes of a buffer of dtype `type`, and back.
inline std::vector<std::byte> to_bytes(dtype type, const std::vector<double>& values) {
  std::vector<std::byte> bytes(values.size() * sg::dtype_size(type));
  sg::visit_host_element(type, [&]<class T>(T) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const T x = [&] {
        if constexpr (sg::is_half_float_v<T>)
          return T(static_cast<float>(values[i]));
        else
          return static_cast<T>(values[i]);
      }();
      std::memcpy(bytes.data() + i * sizeof(T), &x, sizeof(T));
    }
  });
  return bytes;
}

inline std::vector<double> from_bytes(dtype type, const std::vector<std::byte>& bytes) {
  std::vector<double> values(bytes.size() / sg::dtype_size(type));
  sg::visit_host_element(type, [&]<class T>(T) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      T x;
      std::memcpy(&x, bytes.data() + i * sizeof(T), sizeof(T));
      if constexpr (sg::is_half_float_v<T>)
        values[i] = static_cast<double>(static_cast<float>(x));
      else
        values[i] = static_cast<double>(x);
    }
  });
  return values;
}

// max |got - want| / max |want|: the error relative to the scale of the result. Infinite when the
// sizes differ, or where one result is NaN or infinite and the other is not the same (an element the
// kernel left unwritten is NaN: the outputs are poisoned with it before each call).
inline double relative_difference(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return infinity;
  double largest_error = 0, largest_value = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) {
      if (!(got[i] == want[i])) return infinity;
      continue;
    }
    largest_error = std::max(largest_error, std::abs(got[i] - want[i]));
    largest_value = std::max(largest_value, std::abs(want[i]));
  }
  return largest_error == 0 ? 0 : largest_error / largest_value;
}

// The worst of several results compared piece by piece (each relative to its own scale).
inline double relative_difference(const std::vector<std::vector<double>>& got,
                                  const std::vector<std::vector<double>>& want) {
  if (got.size() != want.size()) return infinity;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, relative_difference(got[i], want[i]));
  return worst;
}

// ---- any backend ----------------------------------------------------------------------------------

template <class Backend>
typename Backend::buffer make_buffer(Backend& backend, const host_tensor& t) {
  typename Backend::buffer b = backend.allocate(t.type, static_cast<std::int64_t>(t.values.size()));
  backend.upload(b, to_bytes(t.type, t.values).data());
  return b;
}

template <class Backend>
std::vector<double> values_of(Backend& backend, const typename Backend::buffer& b) {
  std::vector<std::byte> bytes(b.size_bytes());
  backend.download(b, bytes.data());
  return from_bytes(b.type(), bytes);
}

template <class Call>
void set_dims(Call& call, std::initializer_list<std::int64_t> dims) {
  std::copy(dims.begin(), dims.end(), call.dims);
}

// One kernel call on `backend`: the inputs uploaded in order and given as in[0], in[1], ... (the
// first max_inputs of them), an output of `out_numel` elements of `out_type` poisoned with NaN, then
// describe(call, inputs) sets what the op needs (kind, dims, scalar, a chain's steps and operands).
// Returns the output.
template <class Backend, class Describe>
std::vector<double> run_on(Backend& backend, dtype out_type, std::int64_t out_numel,
                           const std::vector<host_tensor>& inputs, Describe& describe) {
  using buffer = typename Backend::buffer;
  std::vector<buffer> in;
  in.reserve(inputs.size());
  for (const host_tensor& t : inputs) in.push_back(make_buffer(backend, t));
  buffer out = make_buffer(
      backend, {out_type, std::vector<double>(static_cast<std::size_t>(out_numel), not_a_number)});
  sg::compute::kernel_call<buffer> call;
  call.type = out_type;
  call.out = &out;
  for (std::size_t k = 0; k < in.size() && k < static_cast<std::size_t>(sg::max_inputs); ++k)
    call.in[k] = &in[k];
  describe(call, in);
  backend.run(call);
  return values_of(backend, out);
}

// ---- references, in double ------------------------------------------------------------------------

// C (m, n) = A (m, k) * B, B (k, n) or, transposed, (n, k).
inline std::vector<double> reference_gemm(const std::vector<double>& a, const std::vector<double>& b,
                                          std::int64_t m, std::int64_t k, std::int64_t n, bool transpose_b) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (std::int64_t p = 0; p < k; ++p)
        sum +=
            a[std::size_t(i * k + p)] * (transpose_b ? b[std::size_t(j * k + p)] : b[std::size_t(p * n + j)]);
      c[std::size_t(i * n + j)] = sum;
    }
  return c;
}

// The direct softmax of one row, in double.
inline std::vector<double> reference_softmax(const std::vector<double>& row) {
  const double row_max = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (double x : row) sum += std::exp(x - row_max);
  std::vector<double> y;
  for (double x : row) y.push_back(std::exp(x - row_max) / sum);
  return y;
}

// HF's apply_rotary_pos_emb with a table's inverse frequencies f and factor a: emb = cat(freqs,
// freqs); out = a (x cos(t f) + rotate_half(x) sin(t f)), rotate_half(x) = cat(-x2, x1), t the
// token's position: position_offset plus its index in the sequence. x (rows = batch heads seq, head_dim).
inline std::vector<double> reference_rope(const std::vector<double>& x, std::int64_t rows, std::int64_t seq,
                                          std::int64_t head_dim, const std::vector<double>& inverse_frequency,
                                          double factor, std::int64_t position_offset = 0) {
  const std::int64_t half = head_dim / 2;
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = position_offset + r % seq;
    for (std::int64_t d = 0; d < head_dim; ++d) {
      const double angle = double(t) * inverse_frequency[static_cast<std::size_t>(d % half)];
      const double* in = x.data() + r * head_dim;
      const double rotated = d < half ? -in[d + half] : in[d - half];
      y[static_cast<std::size_t>(r * head_dim + d)] =
          factor * (in[d] * std::cos(angle) + rotated * std::sin(angle));
    }
  }
  return y;
}

// softmax(q k^T / sqrt(d)) v with the causal mask, one (query, key) pair at a time. keys > 0: k and v
// hold that many keys, every query seeing each (a cross-attention, not causal).
inline std::vector<double> reference_attention(const std::vector<double>& q, const std::vector<double>& k,
                                               const std::vector<double>& v, std::int64_t batch,
                                               std::int64_t heads, std::int64_t kv_heads, std::int64_t seq,
                                               std::int64_t head_dim, std::int64_t keys = 0) {
  std::vector<double> out(q.size(), 0.0);
  const std::int64_t group = heads / kv_heads, length = keys > 0 ? keys : seq;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t kv_h = h / group;
      const double* qh = q.data() + (b * heads + h) * seq * head_dim;
      const double* kh = k.data() + (b * kv_heads + kv_h) * length * head_dim;
      const double* vh = v.data() + (b * kv_heads + kv_h) * length * head_dim;
      double* oh = out.data() + (b * heads + h) * seq * head_dim;
      for (std::int64_t i = 0; i < seq; ++i) {
        std::vector<double> scores;
        const std::int64_t seen = keys > 0 ? keys : i + 1;
        for (std::int64_t j = 0; j < seen; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < head_dim; ++d) dot += qh[i * head_dim + d] * kh[j * head_dim + d];
          scores.push_back(dot / std::sqrt(double(head_dim)));
        }
        const auto weights = reference_softmax(scores);
        for (std::int64_t j = 0; j < seen; ++j)
          for (std::int64_t d = 0; d < head_dim; ++d)
            oh[i * head_dim + d] += weights[std::size_t(j)] * vh[j * head_dim + d];
      }
    }
  return out;
}

// The values as a dtype holds them: what a backend computes from (rounded once to f32 for f32).
inline std::vector<double> as_stored(dtype type, std::vector<double> values) {
  return from_bytes(type, to_bytes(type, values));
}

}  // namespace kernel_contract
