// The cpu kernels against naive references written here in double: triple loops, scalar formulas,
// log-sum-exp by hand. Each kernel runs in double (within 1e-12) and float (within 1e-5), both
// relative to the largest reference value.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/cpu/kernels.hpp"

namespace {

namespace cpu = shardgraph::cpu;
namespace sg = shardgraph;
using std::int64_t;

template <class T>
constexpr double tolerance() {
  return sizeof(T) == sizeof(double) ? 1e-12 : 1e-5;
}

template <class T>
std::vector<T> random_values(int64_t count, unsigned seed, double low = -1, double high = 1) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<double> distribution(low, high);
  std::vector<T> values(static_cast<std::size_t>(count));
  for (auto& value : values) value = T(distribution(engine));
  return values;
}

template <class T>
std::vector<double> to_double(const std::vector<T>& values) {
  return {values.begin(), values.end()};
}

// max |got - want| / max |want|: the error relative to the scale of the result.
template <class T>
double relative_error(const std::vector<T>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double largest_error = 0;
  double largest_value = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    largest_error = std::max(largest_error, std::abs(double(got[i]) - want[i]));
    largest_value = std::max(largest_value, std::abs(want[i]));
  }
  return largest_error / std::max(largest_value, 1e-300);
}

std::string thrown_message(const std::function<void()>& call) {
  try {
    call();
  } catch (const shardgraph::error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// C (m, n) = A (m, k) * B, B (k, n) or, transposed, (n, k).
std::vector<double> reference_gemm(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                                   int64_t k, int64_t n, bool transpose_b) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum +=
            a[std::size_t(i * k + p)] * (transpose_b ? b[std::size_t(j * k + p)] : b[std::size_t(p * n + j)]);
      }
      c[std::size_t(i * n + j)] = sum;
    }
  }
  return c;
}

// The direct softmax of one row, in double.
std::vector<double> reference_softmax(const std::vector<double>& row) {
  const double row_max = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (double x : row) sum += std::exp(x - row_max);
  std::vector<double> y;
  for (double x : row) y.push_back(std::exp(x - row_max) / sum);
  return y;
}

// HF's apply_rotary_pos_emb: emb = cat(freqs, freqs); x * cos(emb) + rotate_half(x) * sin(emb),
// rotate_half(x) = cat(-x2, x1). x (batch, heads, seq, head_dim).
std::vector<double> reference_rope(const std::vector<double>& x, int64_t batch, int64_t heads, int64_t seq,
                                   int64_t head_dim, double theta, int64_t position_offset) {
  const int64_t half = head_dim / 2;
  std::vector<double> y(x.size());
  for (int64_t bh = 0; bh < batch * heads; ++bh) {
    for (int64_t t = 0; t < seq; ++t) {
      const double* in = x.data() + (bh * seq + t) * head_dim;
      double* out = y.data() + (bh * seq + t) * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) {
        const double inv_freq = 1.0 / std::pow(theta, double(2 * (d % half)) / double(head_dim));
        const double angle = double(position_offset + t) * inv_freq;
        const double rotated = d < half ? -in[d + half] : in[d - half];
        out[d] = in[d] * std::cos(angle) + rotated * std::sin(angle);
      }
    }
  }
  return y;
}

// softmax(q k^T / sqrt(d)) v with the causal mask, one (query, key) pair at a time.
std::vector<double> reference_attention(const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v, int64_t batch, int64_t heads,
                                        int64_t kv_heads, int64_t seq, int64_t head_dim) {
  std::vector<double> out(q.size(), 0.0);
  const int64_t group = heads / kv_heads;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv_h = h / group;
      const double* qh = q.data() + (b * heads + h) * seq * head_dim;
      const double* kh = k.data() + (b * kv_heads + kv_h) * seq * head_dim;
      const double* vh = v.data() + (b * kv_heads + kv_h) * seq * head_dim;
      double* oh = out.data() + (b * heads + h) * seq * head_dim;
      for (int64_t i = 0; i < seq; ++i) {
        std::vector<double> scores;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < head_dim; ++d) dot += qh[i * head_dim + d] * kh[j * head_dim + d];
          scores.push_back(dot / std::sqrt(double(head_dim)));
        }
        const auto weights = reference_softmax(scores);
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < head_dim; ++d)
            oh[i * head_dim + d] += weights[std::size_t(j)] * vh[j * head_dim + d];
        }
      }
    }
  }
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("gemm matches a triple loop, plain and transposed, assigning and accumulating", "[cpu]",
                   float, double) {
  using T = TestType;
  // Small sizes, and sizes past Eigen's blocking so that its packed kernels run.
  for (auto [m, k, n] : {std::array<int64_t, 3>{5, 7, 3}, std::array<int64_t, 3>{67, 129, 45}}) {
    for (bool transpose_b : {false, true}) {
      CAPTURE(m, k, n, transpose_b);
      const auto a = random_values<T>(m * k, 1);
      const auto b = random_values<T>(k * n, 2);
      const auto product = reference_gemm(to_double(a), to_double(b), m, k, n, transpose_b);

      std::vector<T> c(std::size_t(m * n), T(7));  // stale contents must be overwritten
      cpu::gemm(a.data(), b.data(), c.data(), m, k, n, transpose_b);
      CHECK(relative_error(c, product) <= tolerance<T>());

      const auto c0 = random_values<T>(m * n, 3);
      auto accumulated = c0;
      cpu::gemm(a.data(), b.data(), accumulated.data(), m, k, n, transpose_b, /*accumulate=*/true);
      auto expected = to_double(c0);
      for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += product[i];
      CHECK(relative_error(accumulated, expected) <= tolerance<T>());
    }
  }
}

TEMPLATE_TEST_CASE("gemm with an empty inner dimension gives zero, or leaves C when accumulating", "[cpu]",
                   float, double) {
  using T = TestType;
  std::vector<T> c(6, T(3));
  cpu::gemm<T>(nullptr, nullptr, c.data(), 2, 0, 3, false, /*accumulate=*/true);
  CHECK(c == std::vector<T>(6, T(3)));
  cpu::gemm<T>(nullptr, nullptr, c.data(), 2, 0, 3, true);
  CHECK(c == std::vector<T>(6, T(0)));
}

TEMPLATE_TEST_CASE("batched_gemm is one gemm per batch entry", "[cpu]", float, double) {
  using T = TestType;
  const int64_t batch = 3, m = 4, k = 6, n = 5;
  for (bool transpose_b : {false, true}) {
    for (bool accumulate : {false, true}) {
      CAPTURE(transpose_b, accumulate);
      const auto a = random_values<T>(batch * m * k, 4);
      const auto b = random_values<T>(batch * k * n, 5);
      auto c = random_values<T>(batch * m * n, 6);
      auto expected = accumulate ? to_double(c) : std::vector<double>(c.size(), 0.0);
      for (int64_t i = 0; i < batch; ++i) {
        const std::vector<double> a_i(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
        const std::vector<double> b_i(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
        const auto c_i = reference_gemm(a_i, b_i, m, k, n, transpose_b);
        for (int64_t j = 0; j < m * n; ++j) expected[std::size_t(i * m * n + j)] += c_i[std::size_t(j)];
      }
      cpu::batched_gemm(a.data(), b.data(), c.data(), batch, m, k, n, transpose_b, accumulate);
      CHECK(relative_error(c, expected) <= tolerance<T>());
    }
  }
}

TEMPLATE_TEST_CASE("layer_norm matches torch.nn.LayerNorm's formula, biased variance and eps", "[cpu]", float,
                   double) {
  using T = TestType;
  const int64_t rows = 5, cols = 19;
  // eps = 0.5 is large enough that forgetting it, or putting it outside the sqrt, fails the check.
  for (double eps : {1e-5, 0.5}) {
    CAPTURE(eps);
    const auto x = random_values<T>(rows * cols, 7, -3, 5);
    const auto w = random_values<T>(cols, 8);
    const auto b = random_values<T>(cols, 9);
    std::vector<double> expected(x.size());
    for (int64_t i = 0; i < rows; ++i) {
      double mean = 0, variance = 0;
      for (int64_t j = 0; j < cols; ++j) mean += double(x[std::size_t(i * cols + j)]) / double(cols);
      for (int64_t j = 0; j < cols; ++j) {
        variance += std::pow(double(x[std::size_t(i * cols + j)]) - mean, 2) / double(cols);
      }
      for (int64_t j = 0; j < cols; ++j) {
        const auto at = std::size_t(i * cols + j);
        expected[at] = (double(x[at]) - mean) / std::sqrt(variance + eps) * double(w[std::size_t(j)]) +
                       double(b[std::size_t(j)]);
      }
    }
    std::vector<T> y(x.size());
    cpu::layer_norm(x.data(), w.data(), b.data(), y.data(), rows, cols, eps);
    CHECK(relative_error(y, expected) <= tolerance<T>());

    auto in_place = x;
    cpu::layer_norm(in_place.data(), w.data(), b.data(), in_place.data(), rows, cols, eps);
    CHECK(in_place == y);
  }
}

TEST_CASE("layer_norm stays accurate when the mean is far larger than the spread", "[cpu]") {
  const int64_t cols = 64;
  auto x = random_values<double>(cols, 10);
  for (auto& value : x) value += 1e6;
  const std::vector<double> w(cols, 1.0), b(cols, 0.0);
  std::vector<double> y(cols);
  cpu::layer_norm(x.data(), w.data(), b.data(), y.data(), 1, cols, 0.0);
  double mean = 0, squares = 0;
  for (double value : y) mean += value / double(cols);
  for (double value : y) squares += value * value / double(cols);
  CHECK(std::abs(mean) < 1e-9);
  CHECK(std::abs(squares - 1) < 1e-9);
}

TEMPLATE_TEST_CASE("rms_norm matches HF LlamaRMSNorm's formula with eps", "[cpu]", float, double) {
  using T = TestType;
  const int64_t rows = 4, cols = 23;
  for (double eps : {1e-6, 0.5}) {
    CAPTURE(eps);
    const auto x = random_values<T>(rows * cols, 11, -2, 2);
    const auto w = random_values<T>(cols, 12);
    std::vector<double> expected(x.size());
    for (int64_t i = 0; i < rows; ++i) {
      double mean_square = 0;
      for (int64_t j = 0; j < cols; ++j)
        mean_square += std::pow(double(x[std::size_t(i * cols + j)]), 2) / double(cols);
      for (int64_t j = 0; j < cols; ++j) {
        const auto at = std::size_t(i * cols + j);
        expected[at] = double(w[std::size_t(j)]) * double(x[at]) / std::sqrt(mean_square + eps);
      }
    }
    std::vector<T> y(x.size());
    cpu::rms_norm(x.data(), w.data(), y.data(), rows, cols, eps);
    CHECK(relative_error(y, expected) <= tolerance<T>());
  }
}

TEST_CASE("gelu_tanh is HF's gelu_new: gelu_tanh(1.0) == 0.8411919906082768", "[cpu]") {
  CHECK(std::abs(cpu::gelu_tanh(1.0) - 0.8411919906082768) <= 1e-12);
  CHECK(cpu::gelu_tanh(0.0) == 0.0);
  CHECK(std::abs(double(cpu::gelu_tanh(1.0f)) - 0.8411919906082768) <= 1e-6);
}

TEMPLATE_TEST_CASE("gelu_tanh and silu match their formulas", "[cpu]", float, double) {
  using T = TestType;
  const double pi = std::acos(-1.0);
  for (double x : {-30.0, -4.0, -1.5, -0.25, 0.0, 0.3, 1.0, 2.5, 8.0, 30.0}) {
    CAPTURE(x);
    const T t = T(x);
    const double gelu = 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
    const double silu = x / (1 + std::exp(-x));
    CHECK(std::abs(double(cpu::gelu_tanh(t)) - gelu) <= tolerance<T>() * std::max(1.0, std::abs(gelu)));
    CHECK(std::abs(double(cpu::silu(t)) - silu) <= tolerance<T>() * std::max(1.0, std::abs(silu)));
  }
  CHECK(std::isfinite(double(cpu::silu(T(-1000)))));
}

TEMPLATE_TEST_CASE("softmax matches exp / sum exp per row, and does not overflow", "[cpu]", float, double) {
  using T = TestType;
  const int64_t rows = 6, cols = 17;
  for (double shift : {0.0, 1000.0}) {
    CAPTURE(shift);
    const auto x = random_values<T>(rows * cols, 13, shift - 4, shift + 4);
    std::vector<double> expected;
    for (int64_t i = 0; i < rows; ++i) {
      const auto row =
          reference_softmax(std::vector<double>(x.begin() + i * cols, x.begin() + (i + 1) * cols));
      expected.insert(expected.end(), row.begin(), row.end());
    }
    std::vector<T> y(x.size());
    cpu::softmax(x.data(), y.data(), rows, cols);
    CHECK(relative_error(y, expected) <= tolerance<T>());

    auto in_place = x;
    cpu::softmax(in_place.data(), in_place.data(), rows, cols);
    CHECK(in_place == y);
  }
}

TEST_CASE("rope rotates the pair (i, i + head_dim/2): a value computed by hand", "[cpu]") {
  // head_dim 4, theta 10000: inv_freq = {1, 1/100}. Token 1 sits at position 1, so the angles are
  // 1 and 0.01:  out[0] = 1 cos 1 - 3 sin 1,       out[1] = 2 cos 0.01 - 4 sin 0.01,
  //              out[2] = 3 cos 1 + 1 sin 1,       out[3] = 4 cos 0.01 + 2 sin 0.01.
  std::vector<double> x = {9, 9, 9, 9, 1, 2, 3, 4};  // (1, 1, 2, 4); token 0 at position 0 is unchanged
  cpu::rope(x.data(), 1, 1, 2, 4, 10000.0);
  const std::vector<double> expected = {
      9, 9, 9, 9, -1.9841106485555495, 1.959900667496664, 2.4623779024123156, 4.019799668334994};
  CHECK(relative_error(x, expected) <= 1e-15);
}

TEMPLATE_TEST_CASE("rope matches HF's apply_rotary_pos_emb with rotate_half, with and without an offset",
                   "[cpu]", float, double) {
  using T = TestType;
  const int64_t batch = 2, heads = 3, seq = 5, head_dim = 8;
  for (double theta : {10000.0, 500000.0}) {
    for (int64_t offset : {int64_t(0), int64_t(37)}) {
      CAPTURE(theta, offset);
      auto x = random_values<T>(batch * heads * seq * head_dim, 14);
      const auto expected = reference_rope(to_double(x), batch, heads, seq, head_dim, theta, offset);
      cpu::rope(x.data(), batch, heads, seq, head_dim, theta, offset);
      CHECK(relative_error(x, expected) <= tolerance<T>());
    }
  }
}

// The scaled table's inverse frequencies and factor, applied by hand to HF's formula:
// out = a * (x cos(p f_i) + rotate_half(x) sin(p f_i)).
std::vector<double> reference_scaled_rope(const std::vector<double>& x, int64_t rows, int64_t seq, int64_t head_dim,
                                          const std::vector<double>& inverse_frequency, double factor) {
  const int64_t half = head_dim / 2;
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % seq;
    for (int64_t d = 0; d < head_dim; ++d) {
      const double angle = double(t) * inverse_frequency[static_cast<std::size_t>(d % half)];
      const double* in = x.data() + r * head_dim;
      const double rotated = d < half ? -in[d + half] : in[d - half];
      y[static_cast<std::size_t>(r * head_dim + d)] = factor * (in[d] * std::cos(angle) + rotated * std::sin(angle));
    }
  }
  return y;
}

TEMPLATE_TEST_CASE("rope with a scaled table rotates by its frequencies and scales by its factor", "[cpu]", float,
                   double) {
  using T = TestType;
  const int64_t batch = 2, heads = 3, seq = 9, head_dim = 8;
  // Frequencies no theta gives (as llama3 and yarn make), and yarn's cos/sin factor.
  sg::compute::rope_frequencies table;
  table.pairs = head_dim / 2;
  table.attention_factor = 1.25;
  const std::vector<double> frequencies = {0.9, 0.31, 0.02, 0.004};
  for (std::size_t i = 0; i < frequencies.size(); ++i) table.inverse_frequency[i] = frequencies[i];
  auto x = random_values<T>(batch * heads * seq * head_dim, 16);
  const auto expected = reference_scaled_rope(to_double(x), batch * heads * seq, seq, head_dim, frequencies, 1.25);
  cpu::rope(x.data(), batch, heads, seq, head_dim, table);
  CHECK(relative_error(x, expected) <= tolerance<T>());

  table.pairs = 3;
  CHECK(contains(thrown_message([&] { cpu::rope(x.data(), batch, heads, seq, head_dim, table); }),
                 "shardgraph: cpu::rope: the frequency table has 3 pairs for a head_dim of 8"));
}

TEST_CASE("rope of a token with position_offset equals rope of the same token later in a sequence", "[cpu]") {
  const int64_t head_dim = 6, seq = 4;
  auto whole = random_values<double>(seq * head_dim, 15);
  std::vector<double> last(whole.end() - head_dim, whole.end());
  cpu::rope(whole.data(), 1, 1, seq, head_dim, 10000.0);
  cpu::rope(last.data(), 1, 1, 1, head_dim, 10000.0, /*position_offset=*/seq - 1);
  CHECK(std::equal(last.begin(), last.end(), whole.end() - head_dim));
}

TEMPLATE_TEST_CASE("causal_attention matches the naive formula for MHA, GQA and MQA", "[cpu]", float,
                   double) {
  using T = TestType;
  const int64_t batch = 2, heads = 4, seq = 7, head_dim = 8;
  for (int64_t kv_heads : {int64_t(4), int64_t(2), int64_t(1)}) {
    CAPTURE(kv_heads);
    const auto q = random_values<T>(batch * heads * seq * head_dim, 16, -2, 2);
    const auto k = random_values<T>(batch * kv_heads * seq * head_dim, 17, -2, 2);
    const auto v = random_values<T>(batch * kv_heads * seq * head_dim, 18);
    const auto expected =
        reference_attention(to_double(q), to_double(k), to_double(v), batch, heads, kv_heads, seq, head_dim);
    std::vector<T> out(q.size());
    cpu::causal_attention(q.data(), k.data(), v.data(), out.data(), batch, heads, kv_heads, seq, head_dim);
    CHECK(relative_error(out, expected) <= tolerance<T>());
  }
}

TEST_CASE("causal_attention: changing a later token does not change earlier outputs", "[cpu]") {
  const int64_t batch = 1, heads = 4, kv_heads = 2, seq = 6, head_dim = 4;
  auto q = random_values<double>(batch * heads * seq * head_dim, 19);
  auto k = random_values<double>(batch * kv_heads * seq * head_dim, 20);
  auto v = random_values<double>(batch * kv_heads * seq * head_dim, 21);
  std::vector<double> before(q.size()), after(q.size());
  cpu::causal_attention(q.data(), k.data(), v.data(), before.data(), batch, heads, kv_heads, seq, head_dim);

  const int64_t changed = 4;  // tokens 0..3 must not see it
  for (int64_t h = 0; h < heads; ++h) q[std::size_t((h * seq + changed) * head_dim)] += 5;
  for (int64_t h = 0; h < kv_heads; ++h) {
    for (int64_t d = 0; d < head_dim; ++d) {
      k[std::size_t((h * seq + changed) * head_dim + d)] += 3;
      v[std::size_t((h * seq + changed) * head_dim + d)] -= 7;
    }
  }
  cpu::causal_attention(q.data(), k.data(), v.data(), after.data(), batch, heads, kv_heads, seq, head_dim);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < seq; ++t) {
      CAPTURE(h, t);
      const auto from = before.begin() + (h * seq + t) * head_dim;
      const bool same = std::equal(from, from + head_dim, after.begin() + (h * seq + t) * head_dim);
      CHECK(same == (t < changed));
    }
  }
}

TEST_CASE("causal_attention rejects heads that are not a multiple of kv_heads", "[cpu]") {
  std::vector<double> q(3 * 2 * 4), kv(2 * 2 * 4), out(q.size());
  const auto message = thrown_message(
      [&] { cpu::causal_attention(q.data(), kv.data(), kv.data(), out.data(), 1, 3, 2, 2, 4); });
  CHECK(contains(message, "shardgraph: cpu::causal_attention: heads (3) is not a multiple of kv_heads (2)"));
}

TEMPLATE_TEST_CASE("split_heads and merge_heads permute (b, t, h, d) <-> (b, h, t, d)", "[cpu]", float,
                   double) {
  using T = TestType;
  const int64_t batch = 2, seq = 3, heads = 4, head_dim = 5;
  std::vector<T> x(std::size_t(batch * seq * heads * head_dim));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = T(i);
  std::vector<T> split(x.size()), merged(x.size());
  cpu::split_heads(x.data(), split.data(), batch, seq, heads, head_dim);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t d = 0; d < head_dim; ++d) {
          REQUIRE(split[std::size_t(((b * heads + h) * seq + t) * head_dim + d)] ==
                  x[std::size_t(((b * seq + t) * heads + h) * head_dim + d)]);
        }
      }
    }
  }
  cpu::merge_heads(split.data(), merged.data(), batch, seq, heads, head_dim);
  CHECK(merged == x);
  CHECK(contains(thrown_message([&] { cpu::split_heads(x.data(), x.data(), batch, seq, heads, head_dim); }),
                 "cannot run in place"));
}

TEMPLATE_TEST_CASE("embedding looks rows up, and vocab-parallel shards sum to the full lookup", "[cpu]",
                   float, double) {
  using T = TestType;
  const int64_t vocab = 10, cols = 3;
  const auto table = random_values<T>(vocab * cols, 22);
  const std::vector<std::int32_t> ids = {0, 9, 5, 6, 3, 6};
  const auto n = int64_t(ids.size());

  std::vector<T> full(std::size_t(n * cols), T(-1));
  cpu::embedding(ids.data(), table.data(), full.data(), n, vocab, cols, 0);
  for (int64_t i = 0; i < n; ++i) {
    CHECK(std::equal(full.begin() + i * cols, full.begin() + (i + 1) * cols,
                     table.begin() + ids[std::size_t(i)] * cols));
  }

  // Two ranks: rows [0, 6) and [6, 10). Each writes its rows and zeros elsewhere.
  const int64_t split = 6;
  std::vector<T> rank0(full.size(), T(-1)), rank1(full.size(), T(-1));
  cpu::embedding(ids.data(), table.data(), rank0.data(), n, split, cols, 0);
  cpu::embedding(ids.data(), table.data() + split * cols, rank1.data(), n, vocab - split, cols, split);
  for (int64_t i = 0; i < n; ++i) {
    const bool on_rank0 = ids[std::size_t(i)] < split;
    for (int64_t j = 0; j < cols; ++j) {
      const auto at = std::size_t(i * cols + j);
      CHECK((on_rank0 ? rank1[at] : rank0[at]) == T(0));
      CHECK(rank0[at] + rank1[at] == full[at]);
    }
  }

  const std::vector<std::int64_t> outside = {-1, 10};
  std::vector<T> zeros(std::size_t(2 * cols), T(-1));
  cpu::embedding(outside.data(), table.data(), zeros.data(), 2, vocab, cols, 0);
  CHECK(zeros == std::vector<T>(zeros.size(), T(0)));
}

TEMPLATE_TEST_CASE(
    "cross_entropy_sum is the sum of log-sum-exp minus the target logit, skipping ignore_index", "[cpu]",
    float, double) {
  using T = TestType;
  const int64_t rows = 5, vocab = 11;
  for (double shift : {0.0, 1000.0}) {
    CAPTURE(shift);
    const auto logits = random_values<T>(rows * vocab, 23, shift - 3, shift + 3);
    const std::vector<std::int64_t> targets = {3, -100, 0, 10, -100};
    double expected = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const auto target = targets[std::size_t(i)];
      if (target == -100) continue;
      double row_max = -1e300;
      for (int64_t j = 0; j < vocab; ++j)
        row_max = std::max(row_max, double(logits[std::size_t(i * vocab + j)]));
      double sum = 0;
      for (int64_t j = 0; j < vocab; ++j)
        sum += std::exp(double(logits[std::size_t(i * vocab + j)]) - row_max);
      expected += row_max + std::log(sum) - double(logits[std::size_t(i * vocab + target)]);
    }
    int64_t counted = -1;
    const double loss = cpu::cross_entropy_sum(logits.data(), targets.data(), rows, vocab, &counted);
    CHECK(counted == 3);
    CHECK(std::abs(loss - expected) <= 1e-12 * std::abs(expected));
    CHECK(cpu::cross_entropy_sum(logits.data(), targets.data(), rows, vocab) == loss);
  }
  const std::vector<std::int32_t> all_ignored = {-100, -100};
  int64_t counted = -1;
  CHECK(cpu::cross_entropy_sum<T>(nullptr, all_ignored.data(), 0, vocab, &counted) == 0.0);
  CHECK(counted == 0);
}

TEST_CASE("cross_entropy_sum rejects a target outside the vocabulary", "[cpu]") {
  const std::vector<double> logits(2 * 4, 0.0);
  const std::vector<std::int64_t> targets = {1, 4};
  const auto message = thrown_message([&] { cpu::cross_entropy_sum(logits.data(), targets.data(), 2, 4); });
  CHECK(contains(message,
                 "shardgraph: cpu::cross_entropy_sum: target 4 of row 1 is outside the vocabulary [0, 4)"));
}

TEST_CASE("cross_entropy_sum leaves a padded vocabulary's columns out and honours the ignore index given",
          "[cpu]") {
  // 3 rows of 5 classes padded to 8 columns; the padding holds large logits that would dominate the
  // log-sum-exp if they were counted.
  const int64_t rows = 3, classes = 5, vocab = 8;
  const auto real = random_values<double>(rows * classes, 29, -3, 3);
  std::vector<double> padded(std::size_t(rows * vocab), 40.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < classes; ++j) padded[std::size_t(i * vocab + j)] = real[std::size_t(i * classes + j)];
  const std::vector<std::int64_t> targets = {4, -1, 0};  // -1 is this loss's ignore index
  const cpu::cross_entropy_targets which{.classes = classes, .ignore_index = -1};
  int64_t counted = 0;
  const double loss = cpu::cross_entropy_sum(padded.data(), targets.data(), rows, vocab, &counted, which);
  const double unpadded = cpu::cross_entropy_sum(real.data(), targets.data(), rows, classes, nullptr, which);
  CHECK(counted == 2);
  CHECK(std::abs(loss - unpadded) <= 1e-14 * std::abs(unpadded));
  // -100 is a target like any other when the ignore index is -1
  const std::vector<std::int64_t> default_ignored = {4, -100, 0};
  CHECK(contains(thrown_message([&] {
                   cpu::cross_entropy_sum(padded.data(), default_ignored.data(), rows, vocab, nullptr, which);
                 }),
                 "target -100 of row 1 is outside the vocabulary [0, 5)"));
  // a padding column is no class
  const std::vector<std::int64_t> padding_target = {4, 5, 0};
  CHECK(contains(thrown_message([&] {
                   cpu::cross_entropy_sum(padded.data(), padding_target.data(), rows, vocab, nullptr, which);
                 }),
                 "target 5 of row 1 is outside the vocabulary [0, 5)"));
  CHECK(contains(thrown_message([&] {
                   cpu::cross_entropy_sum(padded.data(), targets.data(), rows, vocab, nullptr, {.classes = 9});
                 }),
                 "classes = 9 is not in [1, vocab = 8]"));
}

TEST_CASE("the kernels reject negative sizes and missing buffers with a shardgraph error", "[cpu]") {
  std::vector<double> buffer(16);
  double* p = buffer.data();
  CHECK(contains(thrown_message([&] { cpu::gemm(p, p, p, -1, 2, 2, false); }),
                 "shardgraph: cpu::gemm: m is -1, a negative size"));
  CHECK(contains(thrown_message([&] { cpu::gemm<double>(nullptr, p, p, 2, 2, 2, false); }),
                 "shardgraph: cpu::gemm: a is null"));
  CHECK(contains(thrown_message([&] { cpu::layer_norm(p, p, p, p, 2, 0, 1e-5); }), "cpu::layer_norm"));
  CHECK(contains(thrown_message([&] { cpu::rms_norm(p, p, p, 2, 2, -1.0); }), "eps is negative"));
  CHECK(contains(thrown_message([&] { cpu::rope(p, 1, 1, 1, 3, 10000.0); }), "head_dim 3 is odd"));
  CHECK(contains(thrown_message([&] { cpu::softmax(p, p, 1, 0); }), "cpu::softmax"));
  CHECK(contains(thrown_message([&] { cpu::embedding<double, int>(nullptr, p, p, 2, 2, 2, 0); }),
                 "cpu::embedding: ids is null"));
}
