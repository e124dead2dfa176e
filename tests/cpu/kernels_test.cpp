// The cpu backend: the kernel contract (tests/compute/kernel_contract_cases.hpp) through
// cpu::backend, then the cpu kernels' own arguments against naive references written in double:
// accumulating and batched products, in-place calls, positions offset, the checks of sizes and ids.
// Each kernel runs in double (within 1e-12) and float (within 1e-5), both relative to the largest
// reference value.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "catch.hpp"
#include "compute/kernel_contract.hpp"
#include "cpu/finite_differences.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/cpu/backend.hpp"
#include "shardgraph/cpu/kernels.hpp"

namespace {

namespace cpu = shardgraph::cpu;
namespace sg = shardgraph;
using kernel_contract::reference_gemm;
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

using shardgraph::testing::finite_differences::relative_error;

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

// The contract's fixture: the cpu backend, within 1e-12 in f64 and 1e-5 in f32.
struct cpu_fixture {
  using backend = cpu::backend;
  static backend make() { return backend(); }
  static constexpr double f64 = 1e-12, f32 = 1e-5;
};

}  // namespace

using kernel_backends = std::tuple<cpu_fixture>;
#include "compute/kernel_contract_cases.hpp"
#include "compute/combining_kernel_cases.hpp"
#include "compute/kernel_contract_convolution_cases.hpp"

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

TEMPLATE_TEST_CASE("layer_norm and softmax in place give what they give out of place", "[cpu]", float,
                   double) {
  using T = TestType;
  const int64_t rows = 5, cols = 19;
  const auto x = random_values<T>(rows * cols, 7, -3, 5);
  const auto w = random_values<T>(cols, 8);
  const auto b = random_values<T>(cols, 9);
  std::vector<T> y(x.size());
  cpu::layer_norm(x.data(), w.data(), b.data(), y.data(), rows, cols, 0.5);
  auto in_place = x;
  cpu::layer_norm(in_place.data(), w.data(), b.data(), in_place.data(), rows, cols, 0.5);
  CHECK(in_place == y);

  cpu::softmax(x.data(), y.data(), rows, cols);
  in_place = x;
  cpu::softmax(in_place.data(), in_place.data(), rows, cols);
  CHECK(in_place == y);
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

TEST_CASE("gelu_tanh is HF's gelu_new: gelu_tanh(1.0) == 0.8411919906082768", "[cpu]") {
  CHECK(std::abs(cpu::gelu_tanh(1.0) - 0.8411919906082768) <= 1e-12);
  CHECK(cpu::gelu_tanh(0.0) == 0.0);
  CHECK(std::abs(double(cpu::gelu_tanh(1.0f)) - 0.8411919906082768) <= 1e-6);
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

TEMPLATE_TEST_CASE("rope with a position_offset is HF's apply_rotary_pos_emb at the later positions", "[cpu]",
                   float, double) {
  using T = TestType;
  const int64_t batch = 2, heads = 3, seq = 5, head_dim = 8, offset = 37;
  for (double theta : {10000.0, 500000.0}) {
    CAPTURE(theta);
    std::vector<double> inverse_frequency;  // 1 / theta^(2i / head_dim)
    for (int64_t i = 0; i < head_dim / 2; ++i)
      inverse_frequency.push_back(1.0 / std::pow(theta, double(2 * i) / double(head_dim)));
    auto x = random_values<T>(batch * heads * seq * head_dim, 14);
    const auto expected = kernel_contract::reference_rope(to_double(x), batch * heads * seq, seq, head_dim,
                                                          inverse_frequency, 1.0, offset);
    cpu::rope(x.data(), batch, heads, seq, head_dim, theta, offset);
    CHECK(relative_error(x, expected) <= tolerance<T>());
  }
}

TEST_CASE("rope refuses a frequency table of another head_dim", "[cpu]") {
  const int64_t batch = 2, heads = 3, seq = 9, head_dim = 8;
  sg::compute::rope_frequencies table;
  table.pairs = 3;
  auto x = random_values<double>(batch * heads * seq * head_dim, 16);
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

TEST_CASE("split_heads cannot run in place", "[cpu]") {
  std::vector<double> x(2 * 3 * 4 * 5);
  CHECK(contains(thrown_message([&] { cpu::split_heads(x.data(), x.data(), 2, 3, 4, 5); }),
                 "cannot run in place"));
}

TEMPLATE_TEST_CASE("embedding takes int32 ids too", "[cpu]", float, double) {
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
    for (int64_t j = 0; j < classes; ++j)
      padded[std::size_t(i * vocab + j)] = real[std::size_t(i * classes + j)];
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
                   cpu::cross_entropy_sum(padded.data(), targets.data(), rows, vocab, nullptr,
                                          {.classes = 9});
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
