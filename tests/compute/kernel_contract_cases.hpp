#pragma once
// The kernel contract's test cases, over the fixtures listed in `kernel_backends`
// (kernel_contract.hpp says how). Each runs in f64 and f32 and checks
// max |backend - reference| / max |reference| against the fixture's bound for the dtype.
#include "compute/kernel_contract.hpp"

#include <algorithm>
#include <array>
#include <string>

#include <shardgraph/compute/permute_order.hpp>
#include <shardgraph/compute/rope_frequencies.hpp>
#include "catch.hpp"

namespace kernel_contract {

inline constexpr std::array<dtype, 2> contract_dtypes{dtype::f64, dtype::f32};

template <class F>
double bound_of(dtype t) {
  return t == dtype::f64 ? F::f64 : F::f32;
}

// max |backend - want| / max |want| of one kernel call on a fresh backend (run_on).
template <class F, class Describe>
double error_of_call(dtype t, std::int64_t out_numel, const std::vector<host_tensor>& inputs,
                     Describe&& describe, const std::vector<double>& want) {
  auto backend = F::make();
  return relative_difference(run_on(backend, t, out_numel, inputs, describe), want);
}

// The inputs' values as the backend sees them (rounded to the dtype), for the references.
inline std::vector<double> stored(const host_tensor& t) { return as_stored(t.type, t.values); }

}  // namespace kernel_contract

TEMPLATE_LIST_TEST_CASE("kernel contract: linear and matmul match a triple loop", "[compute]",
                        kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  for (const dtype t : contract_dtypes) {
    CAPTURE(sg::dtype_name(t));
    // Small sizes, and sizes past a GEMM library's blocking so that its packed kernels run.
    for (auto [m, k, n] : {std::array<std::int64_t, 3>{5, 7, 3}, std::array<std::int64_t, 3>{67, 129, 45}})
      for (const bool transpose_b : {false, true}) {
        CAPTURE(m, k, n, transpose_b);
        const auto a = random_tensor(t, m * k, 1), b = random_tensor(t, k * n, 2);
        const auto want = reference_gemm(stored(a), stored(b), m, k, n, transpose_b);
        CHECK(error_of_call<F>(
                  t, m * n, {a, b},
                  [&](auto& call, auto&) {
                    call.kind = op::linear;
                    set_dims(call, {m, k, n});
                    call.transpose_b = transpose_b;
                  },
                  want) <= bound_of<F>(t));
      }
    const std::int64_t batch = 3, m = 4, k = 6, n = 5;
    const auto a = random_tensor(t, batch * m * k, 4), b = random_tensor(t, batch * k * n, 5);
    std::vector<double> want;
    for (std::int64_t i = 0; i < batch; ++i) {
      const auto sa = stored(a), sb = stored(b);
      const std::vector<double> a_i(sa.begin() + i * m * k, sa.begin() + (i + 1) * m * k);
      const std::vector<double> b_i(sb.begin() + i * k * n, sb.begin() + (i + 1) * k * n);
      const auto c_i = reference_gemm(a_i, b_i, m, k, n, false);
      want.insert(want.end(), c_i.begin(), c_i.end());
    }
    CHECK(error_of_call<F>(
              t, batch * m * n, {a, b},
              [&](auto& call, auto&) {
                call.kind = op::matmul;
                set_dims(call, {batch, m, k, n});
              },
              want) <= bound_of<F>(t));
  }
}

TEMPLATE_LIST_TEST_CASE("kernel contract: layer_norm is torch's formula, rms_norm HF LlamaRMSNorm's",
                        "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  for (const dtype t : contract_dtypes) {
    CAPTURE(sg::dtype_name(t));
    const std::int64_t rows = 5, cols = 19;
    // eps = 0.5 is large enough that forgetting it, or putting it outside the sqrt, fails the check.
    for (const double eps : {1e-5, 0.5}) {
      CAPTURE(eps);
      const auto x = random_tensor(t, rows * cols, 7, -3, 5), w = random_tensor(t, cols, 8),
                 b = random_tensor(t, cols, 9);
      const auto sx = stored(x), sw = stored(w), sb = stored(b);
      std::vector<double> want(sx.size());
      for (std::int64_t i = 0; i < rows; ++i) {
        double mean = 0, variance = 0;  // biased variance, as torch.nn.LayerNorm
        for (std::int64_t j = 0; j < cols; ++j) mean += sx[std::size_t(i * cols + j)] / double(cols);
        for (std::int64_t j = 0; j < cols; ++j)
          variance += std::pow(sx[std::size_t(i * cols + j)] - mean, 2) / double(cols);
        for (std::int64_t j = 0; j < cols; ++j) {
          const auto at = std::size_t(i * cols + j);
          want[at] = (sx[at] - mean) / std::sqrt(variance + eps) * sw[std::size_t(j)] + sb[std::size_t(j)];
        }
      }
      CHECK(error_of_call<F>(
                t, rows * cols, {x, w, b},
                [&](auto& call, auto&) {
                  call.kind = op::layer_norm;
                  set_dims(call, {rows, cols});
                  call.scalar = eps;
                },
                want) <= bound_of<F>(t));
    }
    const std::int64_t rms_rows = 4, rms_cols = 23;
    for (const double eps : {1e-6, 0.5}) {
      CAPTURE(eps);
      const auto x = random_tensor(t, rms_rows * rms_cols, 11, -2, 2), w = random_tensor(t, rms_cols, 12);
      const auto sx = stored(x), sw = stored(w);
      std::vector<double> want(sx.size());
      for (std::int64_t i = 0; i < rms_rows; ++i) {
        double mean_square = 0;
        for (std::int64_t j = 0; j < rms_cols; ++j)
          mean_square += std::pow(sx[std::size_t(i * rms_cols + j)], 2) / double(rms_cols);
        for (std::int64_t j = 0; j < rms_cols; ++j) {
          const auto at = std::size_t(i * rms_cols + j);
          want[at] = sw[std::size_t(j)] * sx[at] / std::sqrt(mean_square + eps);
        }
      }
      CHECK(error_of_call<F>(
                t, rms_rows * rms_cols, {x, w},
                [&](auto& call, auto&) {
                  call.kind = op::rms_norm;
                  set_dims(call, {rms_rows, rms_cols});
                  call.scalar = eps;
                },
                want) <= bound_of<F>(t));
    }
  }
}

TEMPLATE_LIST_TEST_CASE("kernel contract: gelu is HF's gelu_new (tanh), silu is x sigmoid(x), relu is "
                        "max(x, 0), gelu_erf is torch's exact GELU, quick_gelu is x sigmoid(1.702 x)",
                        "[compute]",
                        kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const double pi = std::acos(-1.0);
  const std::vector<double> xs{-1000.0, -30.0, -4.0, -1.5, -0.25, 0.0, 0.3, 1.0, 2.5, 8.0, 30.0};
  for (const dtype t : contract_dtypes) {
    CAPTURE(sg::dtype_name(t));
    for (const op kind : {op::gelu, op::silu, op::relu, op::gelu_erf, op::quick_gelu}) {
      CAPTURE(sg::op_name(kind));
      auto backend = F::make();
      const auto numel = static_cast<std::int64_t>(xs.size());
      auto describe = [&](auto& call, auto& in) {
        call.chain[0] = {kind, -1, 0};
        call.chain_length = 1;
        call.operands[0] = &in[0];
        call.operand_count = 1;
        call.kind = kind;
        call.dims[0] = numel;
      };
      const auto got = run_on(backend, t, numel, {host_tensor{t, xs}}, describe);
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const double x = xs[i];
        const double want =
            kind == op::gelu  ? 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)))
            : kind == op::silu ? x / (1 + std::exp(-x))
            : kind == op::relu ? std::max(x, 0.0)
            : kind == op::quick_gelu ? x / (1 + std::exp(-1.702 * x))
                               : 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
        CAPTURE(x, got[i], want);
        CHECK(std::isfinite(got[i]));
        CHECK(std::abs(got[i] - want) <= bound_of<F>(t) * std::max(1.0, std::abs(want)));
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("kernel contract: softmax is exp / sum exp per row, and does not overflow",
                        "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const std::int64_t rows = 6, cols = 17;
  for (const dtype t : contract_dtypes)
    for (const double shift : {0.0, 1000.0}) {
      CAPTURE(sg::dtype_name(t), shift);
      const auto x = random_tensor(t, rows * cols, 13, shift - 4, shift + 4);
      const auto sx = stored(x);
      std::vector<double> want;
      for (std::int64_t i = 0; i < rows; ++i) {
        const auto row =
            reference_softmax(std::vector<double>(sx.begin() + i * cols, sx.begin() + (i + 1) * cols));
        want.insert(want.end(), row.begin(), row.end());
      }
      CHECK(error_of_call<F>(
                t, rows * cols, {x},
                [&](auto& call, auto&) {
                  call.kind = op::softmax;
                  set_dims(call, {rows, cols});
                },
                want) <= bound_of<F>(t));
    }
}

TEMPLATE_LIST_TEST_CASE("kernel contract: rope is HF's apply_rotary_pos_emb with the table's frequencies",
                        "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const std::int64_t batch = 2, heads = 3, seq = 9, head_dim = 8, numel = batch * heads * seq * head_dim;
  std::vector<sg::compute::rope_frequencies> tables;
  for (const double theta : {10000.0, 500000.0})
    tables.push_back(sg::compute::make_rope_frequencies({.theta = theta}, head_dim, seq));
  // Frequencies no theta gives (as llama3 and yarn make), and yarn's cos/sin factor.
  sg::compute::rope_frequencies scaled;
  scaled.pairs = head_dim / 2;
  scaled.attention_factor = 1.25;
  const std::array<double, 4> frequencies{0.9, 0.31, 0.02, 0.004};
  for (std::size_t i = 0; i < frequencies.size(); ++i) scaled.inverse_frequency[i] = frequencies[i];
  tables.push_back(scaled);
  for (const dtype t : contract_dtypes)
    for (const sg::compute::rope_frequencies& table : tables) {
      CAPTURE(sg::dtype_name(t), table.inverse_frequency[1], table.attention_factor);
      const auto x = random_tensor(t, numel, 14);
      const std::vector<double> inverse(table.inverse_frequency, table.inverse_frequency + table.pairs);
      const auto want =
          reference_rope(stored(x), batch * heads * seq, seq, head_dim, inverse, table.attention_factor);
      CHECK(error_of_call<F>(
                t, numel, {x},
                [&](auto& call, auto&) {
                  call.kind = op::rope;  // x (batch, heads, seq, head_dim)
                  set_dims(call, {batch, heads, seq, head_dim});
                  call.rope = &table;
                },
                want) <= bound_of<F>(t));
    }
}

TEMPLATE_LIST_TEST_CASE("kernel contract: causal attention is the naive formula for MHA, GQA and MQA",
                        "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const std::int64_t batch = 2, heads = 4, seq = 7, head_dim = 8;
  for (const dtype t : contract_dtypes)
    for (const std::int64_t kv_heads : {std::int64_t{4}, std::int64_t{2}, std::int64_t{1}}) {
      CAPTURE(sg::dtype_name(t), kv_heads);
      const auto q = random_tensor(t, batch * heads * seq * head_dim, 16, -2, 2);
      const auto k = random_tensor(t, batch * kv_heads * seq * head_dim, 17, -2, 2);
      const auto v = random_tensor(t, batch * kv_heads * seq * head_dim, 18);
      const auto want =
          reference_attention(stored(q), stored(k), stored(v), batch, heads, kv_heads, seq, head_dim);
      CHECK(error_of_call<F>(
                t, batch * heads * seq * head_dim, {q, k, v},
                [&](auto& call, auto&) {
                  call.kind = op::attention;  // scalar 0: scores scaled by 1 / sqrt(head_dim)
                  set_dims(call, {batch, heads, kv_heads, seq, head_dim});
                },
                want) <= bound_of<F>(t));
    }
}

TEMPLATE_LIST_TEST_CASE("kernel contract: cross-attention (keys of another length, not causal) is the naive formula",
                        "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const std::int64_t batch = 2, heads = 4, seq = 3, keys = 6, head_dim = 8;
  for (const dtype t : contract_dtypes)
    for (const std::int64_t kv_heads : {std::int64_t{4}, std::int64_t{2}}) {
      CAPTURE(sg::dtype_name(t), kv_heads);
      const auto q = random_tensor(t, batch * heads * seq * head_dim, 26, -2, 2);
      const auto k = random_tensor(t, batch * kv_heads * keys * head_dim, 27, -2, 2);
      const auto v = random_tensor(t, batch * kv_heads * keys * head_dim, 28);
      const auto want =
          reference_attention(stored(q), stored(k), stored(v), batch, heads, kv_heads, seq, head_dim, keys);
      CHECK(error_of_call<F>(
                t, batch * heads * seq * head_dim, {q, k, v},
                [&](auto& call, auto&) {
                  call.kind = op::attention;
                  call.masking = {.causal = false, .mask = sg::attention_mask::none};
                  set_dims(call, {batch, heads, kv_heads, seq, head_dim, keys});
                },
                want) <= bound_of<F>(t));
    }
}

TEMPLATE_LIST_TEST_CASE("kernel contract: split_heads and merge_heads permute (b, t, h, d) <-> (b, h, t, d)",
                        "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const std::int64_t batch = 2, seq = 3, heads = 4, head_dim = 5, numel = batch * seq * heads * head_dim;
  std::vector<double> x(static_cast<std::size_t>(numel)), split(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < seq; ++t)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t d = 0; d < head_dim; ++d)
          split[std::size_t(((b * heads + h) * seq + t) * head_dim + d)] =
              x[std::size_t(((b * seq + t) * heads + h) * head_dim + d)];
  for (const dtype t : contract_dtypes) {
    CAPTURE(sg::dtype_name(t));
    for (const op kind : {op::split_heads, op::merge_heads}) {
      CAPTURE(sg::op_name(kind));
      CHECK(error_of_call<F>(
                t, numel, {host_tensor{t, kind == op::split_heads ? x : split}},
                [&](auto& call, auto&) {
                  call.kind = kind;
                  set_dims(call, {batch, seq, heads, head_dim});
                },
                kind == op::split_heads ? split : x) == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("kernel contract: permute moves each element of x (2, 3, 4, 5) by every permutation",
                        "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const std::array<std::int64_t, 4> n{2, 3, 4, 5};
  const std::int64_t numel = n[0] * n[1] * n[2] * n[3];
  std::vector<double> x(static_cast<std::size_t>(numel));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i);
  std::array<int, 4> from{0, 1, 2, 3};
  do {
    CAPTURE(from[0], from[1], from[2], from[3]);
    // The reference scatters: x's element at index (i0, i1, i2, i3) lands at (i[from[0]], ..., i[from[3]]).
    std::vector<double> want(x.size());
    std::array<std::int64_t, 4> i{};
    for (i[0] = 0; i[0] < n[0]; ++i[0])
      for (i[1] = 0; i[1] < n[1]; ++i[1])
        for (i[2] = 0; i[2] < n[2]; ++i[2])
          for (i[3] = 0; i[3] < n[3]; ++i[3]) {
            std::int64_t at = 0;
            for (const int d : from) at = at * n[std::size_t(d)] + i[std::size_t(d)];
            want[std::size_t(at)] = x[std::size_t(((i[0] * n[1] + i[1]) * n[2] + i[2]) * n[3] + i[3])];
          }
    for (const dtype t : contract_dtypes)
      CHECK(error_of_call<F>(
                t, numel, {host_tensor{t, x}},
                [&](auto& call, auto&) {
                  call.kind = op::permute;
                  set_dims(call, {n[0], n[1], n[2], n[3], sg::compute::permute_order(from)});
                },
                want) == 0);
  } while (std::next_permutation(from.begin(), from.end()));
}

// The dropout mask as compute/dropout_mask.hpp writes it down, spelled out here on its own.
inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

TEMPLATE_LIST_TEST_CASE("kernel contract: dropout keeps the elements whose splitmix64 draw of their whole-tensor "
                        "index is at least p 2^64, scaled by 1 / (1 - p)",
                        "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  // the block (2, 3, 4, 5) at (0, 0, 4, 5) of the whole tensor (2, 3, 8, 10); layer 3 of a block
  const std::array<std::int64_t, 4> n{2, 3, 4, 5}, offset{0, 0, 4, 5}, whole{2, 3, 8, 10};
  const std::uint64_t seed = 1234, step = 6;
  const std::int64_t layer = 3;
  const double p = 0.25;
  const std::uint64_t golden = 0x9E3779B97F4A7C15ull;
  const std::uint64_t stream = mix64(mix64(seed + (step + 1) * golden) + (layer + 1) * golden);
  const std::int64_t numel = n[0] * n[1] * n[2] * n[3];
  std::vector<double> x(static_cast<std::size_t>(numel)), want(x.size());
  std::size_t o = 0, kept = 0;
  for (std::int64_t a = 0; a < n[0]; ++a)
    for (std::int64_t b = 0; b < n[1]; ++b)
      for (std::int64_t c = 0; c < n[2]; ++c)
        for (std::int64_t d = 0; d < n[3]; ++d, ++o) {
          x[o] = 1.0 + static_cast<double>(o);
          const std::int64_t index = ((a * whole[1] + b) * whole[2] + c + offset[2]) * whole[3] + d + offset[3];
          const bool keep = mix64(stream + static_cast<std::uint64_t>(index + 1) * golden) >= (1ull << 62);
          want[o] = keep ? x[o] / (1 - p) : 0.0;
          kept += keep;
        }
  REQUIRE(kept > 0);
  REQUIRE(kept < x.size());
  for (const dtype t : contract_dtypes) {
    CAPTURE(sg::dtype_name(t));
    CHECK(error_of_call<F>(
              t, numel, {host_tensor{t, x}},
              [&](auto& call, auto&) {
                call.kind = op::dropout;
                set_dims(call, {n[0], n[1], n[2], n[3]});
                call.scalar = p;
                call.dropout.seed = seed;
                call.dropout.run = {.active = true, .step = step};
                call.dropout.layer = layer;
                for (std::size_t k = 0; k < 4; ++k) {
                  call.dropout.offset[k] = offset[k];
                  call.dropout.whole[k] = whole[k];
                }
              },
              want) <= bound_of<F>(t));
  }
}

TEMPLATE_LIST_TEST_CASE(
    "kernel contract: embedding looks rows up; vocab-parallel shards sum to the whole lookup", "[compute]",
    kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const std::int64_t vocab = 10, cols = 3, split = 6;
  const std::vector<std::int64_t> ids{0, 9, 5,  6,
                                      3, 6, -1, 10};  // the last two outside every table: zero rows
  const auto tokens = static_cast<std::int64_t>(ids.size());
  for (const dtype t : contract_dtypes) {
    CAPTURE(sg::dtype_name(t));
    const auto table = random_tensor(t, vocab * cols, 22);
    const auto st = stored(table);
    // rows [first, first + rows) of the table, as the rank holding them sees it
    const auto lookup = [&](std::int64_t first, std::int64_t rows) {
      std::vector<double> want(static_cast<std::size_t>(tokens * cols), 0.0);
      for (std::int64_t i = 0; i < tokens; ++i) {
        const std::int64_t id = ids[std::size_t(i)];
        if (id < first || id >= first + rows) continue;
        for (std::int64_t j = 0; j < cols; ++j)
          want[std::size_t(i * cols + j)] = st[std::size_t(id * cols + j)];
      }
      const host_tensor part{
          t, std::vector<double>(st.begin() + first * cols, st.begin() + (first + rows) * cols)};
      auto backend = F::make();
      auto describe = [&](auto& call, auto&) {
        call.kind = op::embedding;
        set_dims(call, {tokens, rows, cols, first});
      };
      const auto got = run_on(backend, t, tokens * cols, {id_tensor(ids), part}, describe);
      CHECK(got == want);
      return got;
    };
    const auto whole = lookup(0, vocab);
    const auto first = lookup(0, split), second = lookup(split, vocab - split);
    for (std::size_t i = 0; i < whole.size(); ++i) CHECK(first[i] + second[i] == whole[i]);
  }
}

TEMPLATE_LIST_TEST_CASE(
    "kernel contract: cross_entropy is log-sum-exp minus the target logit, over the classes", "[compute]",
    kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  // sum over rows whose target is not ignore_index of lse(row[0:classes]) - row[target], / divisor
  const auto reference = [](const std::vector<double>& logits, const std::vector<std::int64_t>& targets,
                            std::int64_t vocab, std::int64_t classes, double divisor,
                            std::int64_t ignore_index) {
    double sum = 0;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (targets[i] == ignore_index) continue;
      const double* row = logits.data() + static_cast<std::int64_t>(i) * vocab;
      const double row_max = *std::max_element(row, row + classes);
      double exps = 0;
      for (std::int64_t j = 0; j < classes; ++j) exps += std::exp(row[j] - row_max);
      sum += row_max + std::log(exps) - row[targets[i]];
    }
    return sum / divisor;
  };
  struct variant {
    std::int64_t vocab, classes, divisor, ignore_index;
    std::vector<std::int64_t> targets;
    double padding;  // the logits of the columns [classes, vocab): large, they would dominate if counted
  };
  const std::vector<variant> variants{{11, 11, 1, -100, {3, -100, 0, 10, -100}, 0},
                                      {11, 11, 3, -100, {3, -100, 0, 10, -100}, 0},
                                      {8, 5, 2, -1, {4, -1, 0}, 40}};
  for (const dtype t : contract_dtypes)
    for (const variant& v : variants)
      for (const double shift : {0.0, 1000.0}) {
        CAPTURE(sg::dtype_name(t), v.vocab, v.classes, v.divisor, shift);
        const auto rows = static_cast<std::int64_t>(v.targets.size());
        auto logits = random_tensor(t, rows * v.vocab, 23, shift - 3, shift + 3);
        for (std::int64_t i = 0; i < rows; ++i)
          for (std::int64_t j = v.classes; j < v.vocab; ++j)
            logits.values[std::size_t(i * v.vocab + j)] = shift + v.padding;
        const double want =
            reference(stored(logits), v.targets, v.vocab, v.classes, double(v.divisor), v.ignore_index);
        CHECK(error_of_call<F>(t, 1, {logits, id_tensor(v.targets)},
                               [&](auto& call, auto&) {
                                 call.kind = op::cross_entropy;
                                 set_dims(call, {rows, v.vocab, v.classes, v.divisor, v.ignore_index});
                               },
                               {want}) <= bound_of<F>(t));
      }
}
