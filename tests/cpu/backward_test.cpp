// The cpu backward kernels against central finite differences of the forward kernels, in double:
// for a forward y = f(x) and a random output gradient dy, the loss L(x) = sum(dy * f(x)) has the
// gradient that the backward kernel returns, and (L(x + h e_i) - L(x - h e_i)) / 2h approximates
// it to O(h^2). With h = 1e-6 the two agree within 1e-6, relative to the largest component. Each
// kernel also runs in float, within 1e-4 of the double kernel on the same (rounded) inputs.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "cpu/finite_differences.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/cpu/backward.hpp"
#include "shardgraph/cpu/kernels.hpp"

namespace {

namespace cpu = shardgraph::cpu;
namespace sg = shardgraph;
using std::int64_t;
using vector = std::vector<double>;
using namespace shardgraph::testing::finite_differences;

vector plus(const vector& a, const vector& b) {
  REQUIRE(a.size() == b.size());
  vector sum(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  return sum;
}

vector times(double factor, vector values) {
  for (auto& value : values) value *= factor;
  return values;
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

// The forward of add_bias and of position_embedding, as the cpu backend runs them.
template <class T>
std::vector<T> add_bias(const std::vector<T>& x, const std::vector<T>& b) {
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] + b[i % b.size()];
  return y;
}

template <class T>
std::vector<T> position_embedding(const std::vector<T>& x, const std::vector<T>& table, int64_t batch,
                                  int64_t seq, int64_t cols) {
  std::vector<T> y(x.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t)
      for (int64_t j = 0; j < cols; ++j) {
        const auto at = std::size_t((b * seq + t) * cols + j);
        y[at] = x[at] + table[std::size_t(t * cols + j)];
      }
  return y;
}

}  // namespace

TEST_CASE("linear's gradients: gemm for dx and gemm_at_b for dw, in both weight layouts", "[cpu]") {
  const int64_t m = 4, k = 5, n = 3;
  for (bool transpose_b : {false, true}) {
    CAPTURE(transpose_b);
    const auto x = random_values(m * k, 1);
    const auto w = random_values(k * n, 2);  // (k, n), or (n, k) when transposed
    const auto dy = random_values(m * n, 3);
    auto loss = [&](const vector& x_, const vector& w_) {
      vector y(std::size_t(m * n));
      cpu::gemm(x_.data(), w_.data(), y.data(), m, k, n, transpose_b);
      return dot(dy, y);
    };
    // The mapping that gemm_backward.hpp documents, in T.
    auto gradients = [&]<class T>(const std::vector<T>& x_, const std::vector<T>& w_,
                                  const std::vector<T>& dy_) {
      std::vector<T> dx(x_.size(), T(7)), dw(w_.size(), T(7));  // stale contents must be overwritten
      cpu::gemm(dy_.data(), w_.data(), dx.data(), m, n, k, !transpose_b);
      if (transpose_b) {
        cpu::gemm_at_b(dy_.data(), x_.data(), dw.data(), m, n, k, /*accumulate=*/false);
      } else {
        cpu::gemm_at_b(x_.data(), dy_.data(), dw.data(), m, k, n, /*accumulate=*/false);
      }
      return std::array{dx, dw};
    };
    const auto [dx, dw] = gradients(x, w, dy);
    CHECK(relative_error(dx, numeric_gradient([&](const vector& v) { return loss(v, w); }, x)) <=
          finite_difference_tolerance);
    CHECK(relative_error(dw, numeric_gradient([&](const vector& v) { return loss(x, v); }, w)) <=
          finite_difference_tolerance);

    const auto [dx_float, dw_float] = gradients(to_float(x), to_float(w), to_float(dy));
    const auto [dx_rounded, dw_rounded] =
        gradients(rounded_to_float(x), rounded_to_float(w), rounded_to_float(dy));
    CHECK(relative_error(dx_float, dx_rounded) <= float_tolerance);
    CHECK(relative_error(dw_float, dw_rounded) <= float_tolerance);
  }
}

TEST_CASE("gemm_at_b is A^T B past Eigen's blocking, and accumulates: calling twice doubles", "[cpu]") {
  const int64_t m = 67, k = 129, n = 45;
  const auto a = random_values(m * k, 4);
  const auto b = random_values(m * n, 5);
  vector expected(std::size_t(k * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        expected[std::size_t(p * n + j)] += a[std::size_t(i * k + p)] * b[std::size_t(i * n + j)];

  vector c(expected.size(), 7.0);
  cpu::gemm_at_b(a.data(), b.data(), c.data(), m, k, n, /*accumulate=*/false);
  CHECK(relative_error(c, expected) <= 1e-12);
  cpu::gemm_at_b(a.data(), b.data(), c.data(), m, k, n, /*accumulate=*/true);
  CHECK(relative_error(c, times(2, expected)) <= 1e-12);

  std::vector<float> c_float(expected.size(), 0.0f);
  cpu::gemm_at_b(to_float(a).data(), to_float(b).data(), c_float.data(), m, k, n, false);
  CHECK(relative_error(c_float, expected) <= float_tolerance);

  vector empty(6, 3.0);
  cpu::gemm_at_b<double>(nullptr, nullptr, empty.data(), 0, 2, 3, /*accumulate=*/true);
  CHECK(empty == vector(6, 3.0));
  cpu::gemm_at_b<double>(nullptr, nullptr, empty.data(), 0, 2, 3, /*accumulate=*/false);
  CHECK(empty == vector(6, 0.0));
}

TEST_CASE("matmul's gradients: batched_gemm for da and batched_gemm_at_b for db", "[cpu]") {
  const int64_t batch = 2, m = 3, k = 4, n = 5;
  const auto a = random_values(batch * m * k, 6);
  const auto b = random_values(batch * k * n, 7);
  const auto dc = random_values(batch * m * n, 8);
  auto loss = [&](const vector& a_, const vector& b_) {
    vector c(dc.size());
    cpu::batched_gemm(a_.data(), b_.data(), c.data(), batch, m, k, n, false);
    return dot(dc, c);
  };
  vector da(a.size()), db(b.size(), 0.0);
  cpu::batched_gemm(dc.data(), b.data(), da.data(), batch, m, n, k, /*transpose_b=*/true);
  cpu::batched_gemm_at_b(a.data(), dc.data(), db.data(), batch, m, k, n, /*accumulate=*/true);
  CHECK(relative_error(da, numeric_gradient([&](const vector& v) { return loss(v, b); }, a)) <=
        finite_difference_tolerance);
  CHECK(relative_error(db, numeric_gradient([&](const vector& v) { return loss(a, v); }, b)) <=
        finite_difference_tolerance);
  const auto once = db;
  cpu::batched_gemm_at_b(a.data(), dc.data(), db.data(), batch, m, k, n, /*accumulate=*/true);
  CHECK(relative_error(db, times(2, once)) <= 1e-12);
}

TEST_CASE("bias_backward sums dy over rows into db, accumulating", "[cpu]") {
  const int64_t rows = 6, n = 5;
  const auto x = random_values(rows * n, 9);
  const auto b = random_values(n, 10);
  const auto dy = random_values(rows * n, 11);
  const auto numeric = numeric_gradient([&](const vector& v) { return dot(dy, add_bias(x, v)); }, b);
  vector db(std::size_t(n), 0.0);
  cpu::bias_backward(dy.data(), db.data(), rows, n);
  CHECK(relative_error(db, numeric) <= finite_difference_tolerance);
  const auto once = db;
  cpu::bias_backward(dy.data(), db.data(), rows, n);
  CHECK(db == times(2, once));

  std::vector<float> db_float(std::size_t(n), 0.0f);
  vector db_rounded(std::size_t(n), 0.0);
  cpu::bias_backward(to_float(dy).data(), db_float.data(), rows, n);
  cpu::bias_backward(rounded_to_float(dy).data(), db_rounded.data(), rows, n);
  CHECK(relative_error(db_float, db_rounded) <= float_tolerance);
}

TEST_CASE("layer_norm_backward: dx, and dw and db accumulated, match finite differences", "[cpu]") {
  const int64_t rows = 4, cols = 7;
  for (double eps : {1e-5, 0.5}) {
    CAPTURE(eps);
    const auto x = random_values(rows * cols, 12, -3, 5);
    const auto w = random_values(cols, 13);
    const auto b = random_values(cols, 14);
    const auto dy = random_values(rows * cols, 15);
    auto loss = [&](const vector& x_, const vector& w_, const vector& b_) {
      vector y(x_.size());
      cpu::layer_norm(x_.data(), w_.data(), b_.data(), y.data(), rows, cols, eps);
      return dot(dy, y);
    };
    const auto dx_numeric = numeric_gradient([&](const vector& v) { return loss(v, w, b); }, x);
    const auto dw_numeric = numeric_gradient([&](const vector& v) { return loss(x, v, b); }, w);
    const auto db_numeric = numeric_gradient([&](const vector& v) { return loss(x, w, v); }, b);

    vector dx(x.size(), 7.0), dw(w.size(), 0.0), db(b.size(), 0.0);
    cpu::layer_norm_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), rows, cols, eps);
    CHECK(relative_error(dx, dx_numeric) <= finite_difference_tolerance);
    CHECK(relative_error(dw, dw_numeric) <= finite_difference_tolerance);
    CHECK(relative_error(db, db_numeric) <= finite_difference_tolerance);

    const auto dw_once = dw, db_once = db;
    auto in_place = dy;  // dx written over dy; dw and db accumulate a second time
    cpu::layer_norm_backward(x.data(), w.data(), in_place.data(), in_place.data(), dw.data(), db.data(), rows,
                             cols, eps);
    CHECK(in_place == dx);
    CHECK(dw == times(2, dw_once));
    CHECK(db == times(2, db_once));

    const auto xr = rounded_to_float(x), wr = rounded_to_float(w), dyr = rounded_to_float(dy);
    vector dx_rounded(x.size()), dw_rounded(w.size(), 0.0), db_rounded(b.size(), 0.0);
    cpu::layer_norm_backward(xr.data(), wr.data(), dyr.data(), dx_rounded.data(), dw_rounded.data(),
                             db_rounded.data(), rows, cols, eps);
    const auto xf = to_float(x), wf = to_float(w), dyf = to_float(dy);
    std::vector<float> dx_float(x.size()), dw_float(w.size(), 0.0f), db_float(b.size(), 0.0f);
    cpu::layer_norm_backward(xf.data(), wf.data(), dyf.data(), dx_float.data(), dw_float.data(),
                             db_float.data(), rows, cols, eps);
    CHECK(relative_error(dx_float, dx_rounded) <= float_tolerance);
    CHECK(relative_error(dw_float, dw_rounded) <= float_tolerance);
    CHECK(relative_error(db_float, db_rounded) <= float_tolerance);
  }
}

TEST_CASE("rms_norm_backward: dx, and dw accumulated, match finite differences", "[cpu]") {
  const int64_t rows = 4, cols = 9;
  for (double eps : {1e-6, 0.5}) {
    CAPTURE(eps);
    const auto x = random_values(rows * cols, 16, -2, 2);
    const auto w = random_values(cols, 17);
    const auto dy = random_values(rows * cols, 18);
    auto loss = [&](const vector& x_, const vector& w_) {
      vector y(x_.size());
      cpu::rms_norm(x_.data(), w_.data(), y.data(), rows, cols, eps);
      return dot(dy, y);
    };
    const auto dx_numeric = numeric_gradient([&](const vector& v) { return loss(v, w); }, x);
    const auto dw_numeric = numeric_gradient([&](const vector& v) { return loss(x, v); }, w);

    vector dx(x.size(), 7.0), dw(w.size(), 0.0);
    cpu::rms_norm_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), rows, cols, eps);
    CHECK(relative_error(dx, dx_numeric) <= finite_difference_tolerance);
    CHECK(relative_error(dw, dw_numeric) <= finite_difference_tolerance);

    const auto dw_once = dw;
    auto in_place = dy;  // dx written over dy; dw accumulates a second time
    cpu::rms_norm_backward(x.data(), w.data(), in_place.data(), in_place.data(), dw.data(), rows, cols, eps);
    CHECK(in_place == dx);
    CHECK(dw == times(2, dw_once));

    const auto xr = rounded_to_float(x), wr = rounded_to_float(w), dyr = rounded_to_float(dy);
    vector dx_rounded(x.size()), dw_rounded(w.size(), 0.0);
    cpu::rms_norm_backward(xr.data(), wr.data(), dyr.data(), dx_rounded.data(), dw_rounded.data(), rows, cols,
                           eps);
    const auto xf = to_float(x), wf = to_float(w), dyf = to_float(dy);
    std::vector<float> dx_float(x.size()), dw_float(w.size(), 0.0f);
    cpu::rms_norm_backward(xf.data(), wf.data(), dyf.data(), dx_float.data(), dw_float.data(), rows, cols,
                           eps);
    CHECK(relative_error(dx_float, dx_rounded) <= float_tolerance);
    CHECK(relative_error(dw_float, dw_rounded) <= float_tolerance);
  }
}

TEST_CASE("gelu_tanh_grad and silu_grad are the derivatives of gelu_tanh and silu", "[cpu]") {
  const double h = finite_difference_step;
  for (double x : {-30.0, -4.0, -1.5, -0.25, 0.0, 0.3, 1.0, 2.5, 8.0, 30.0}) {
    CAPTURE(x);
    const double gelu_numeric = (cpu::gelu_tanh(x + h) - cpu::gelu_tanh(x - h)) / (2 * h);
    const double silu_numeric = (cpu::silu(x + h) - cpu::silu(x - h)) / (2 * h);
    CHECK(std::abs(cpu::gelu_tanh_grad(x) - gelu_numeric) <=
          finite_difference_tolerance * std::max(1.0, std::abs(gelu_numeric)));
    CHECK(std::abs(cpu::silu_grad(x) - silu_numeric) <=
          finite_difference_tolerance * std::max(1.0, std::abs(silu_numeric)));
    const double rounded = double(float(x));
    CHECK(std::abs(double(cpu::gelu_tanh_grad(float(x))) - cpu::gelu_tanh_grad(rounded)) <=
          float_tolerance * std::max(1.0, std::abs(cpu::gelu_tanh_grad(rounded))));
    CHECK(std::abs(double(cpu::silu_grad(float(x))) - cpu::silu_grad(rounded)) <=
          float_tolerance * std::max(1.0, std::abs(cpu::silu_grad(rounded))));
  }
  CHECK(cpu::gelu_tanh_grad(0.0) == 0.5);
  CHECK(cpu::silu_grad(0.0) == 0.5);
  CHECK(cpu::silu_grad(-1000.0) == 0.0);
  CHECK(cpu::silu_grad(-1000.0f) == 0.0f);
  CHECK(cpu::silu_grad(1000.0f) == 1.0f);
}

TEST_CASE("relu_grad and gelu_erf_grad are the derivatives of relu and gelu_erf", "[cpu]") {
  const double h = finite_difference_step;
  for (double x : {-30.0, -4.0, -1.5, -0.25, 0.3, 1.0, 2.5, 8.0, 30.0}) {  // relu has no derivative at 0
    CAPTURE(x);
    const double relu_numeric = (cpu::relu(x + h) - cpu::relu(x - h)) / (2 * h);
    const double gelu_numeric = (cpu::gelu_erf(x + h) - cpu::gelu_erf(x - h)) / (2 * h);
    CHECK(std::abs(cpu::relu_grad(x) - relu_numeric) <= finite_difference_tolerance);
    CHECK(std::abs(cpu::gelu_erf_grad(x) - gelu_numeric) <=
          finite_difference_tolerance * std::max(1.0, std::abs(gelu_numeric)));
    const double rounded = double(float(x));
    CHECK(std::abs(double(cpu::gelu_erf_grad(float(x))) - cpu::gelu_erf_grad(rounded)) <=
          float_tolerance * std::max(1.0, std::abs(cpu::gelu_erf_grad(rounded))));
  }
  CHECK(cpu::relu_grad(0.0) == 0.0);  // torch's threshold_backward
  CHECK(cpu::gelu_erf_grad(0.0) == 0.5);
  CHECK(cpu::gelu_erf(1.0) == Approx(0.8413447460685429).epsilon(1e-15));
  CHECK(cpu::gelu_erf_grad(-1000.0) == 0.0);
}

TEST_CASE("quick_gelu_grad is the derivative of quick_gelu", "[cpu]") {
  const double h = finite_difference_step;
  for (double x : {-30.0, -4.0, -1.5, -0.25, 0.0, 0.3, 1.0, 2.5, 8.0, 30.0}) {
    CAPTURE(x);
    const double numeric = (cpu::quick_gelu(x + h) - cpu::quick_gelu(x - h)) / (2 * h);
    CHECK(std::abs(cpu::quick_gelu_grad(x) - numeric) <= finite_difference_tolerance * std::max(1.0, std::abs(numeric)));
    const double rounded = double(float(x));
    CHECK(std::abs(double(cpu::quick_gelu_grad(float(x))) - cpu::quick_gelu_grad(rounded)) <=
          float_tolerance * std::max(1.0, std::abs(cpu::quick_gelu_grad(rounded))));
  }
  CHECK(cpu::quick_gelu(0.0) == 0.0);
  CHECK(cpu::quick_gelu_grad(0.0) == 0.5);
  CHECK(cpu::quick_gelu(1.0) == Approx(1.0 / (1.0 + std::exp(-1.702))).epsilon(1e-15));
  CHECK(cpu::quick_gelu_grad(-1000.0) == 0.0);
  CHECK(cpu::quick_gelu_grad(1000.0) == 1.0);
}

TEST_CASE("softmax_backward is y * (dy - sum(dy * y)), from softmax's output", "[cpu]") {
  const int64_t rows = 4, cols = 9;
  const auto x = random_values(rows * cols, 19, -3, 3);
  const auto dy = random_values(rows * cols, 20);
  vector y(x.size());
  cpu::softmax(x.data(), y.data(), rows, cols);
  const auto numeric = numeric_gradient(
      [&](const vector& v) {
        vector out(v.size());
        cpu::softmax(v.data(), out.data(), rows, cols);
        return dot(dy, out);
      },
      x);
  vector dx(x.size(), 7.0);
  cpu::softmax_backward(y.data(), dy.data(), dx.data(), rows, cols);
  CHECK(relative_error(dx, numeric) <= finite_difference_tolerance);

  auto in_place = dy;
  cpu::softmax_backward(y.data(), in_place.data(), in_place.data(), rows, cols);
  CHECK(in_place == dx);

  const auto yf = to_float(y), dyf = to_float(dy);
  const auto yr = rounded_to_float(y), dyr = rounded_to_float(dy);
  std::vector<float> dx_float(x.size());
  vector dx_rounded(x.size());
  cpu::softmax_backward(yf.data(), dyf.data(), dx_float.data(), rows, cols);
  cpu::softmax_backward(yr.data(), dyr.data(), dx_rounded.data(), rows, cols);
  CHECK(relative_error(dx_float, dx_rounded) <= float_tolerance);
}

TEST_CASE("rope_backward with a scaled table is the transpose of rope with it (yarn's factor included)", "[cpu]") {
  const int64_t batch = 2, heads = 2, seq = 5, head_dim = 8;
  const sg::compute::rope_frequencies table = sg::compute::make_rope_frequencies(
      {.type = sg::rope_type::yarn, .factor = 4, .original_max_positions = 16}, head_dim, seq);
  REQUIRE(table.attention_factor > 1.1);
  const auto x = random_values(batch * heads * seq * head_dim, 23);
  const auto dy = random_values(x.size(), 24);
  const auto numeric = numeric_gradient(
      [&](vector v) {
        cpu::rope(v.data(), batch, heads, seq, head_dim, table);
        return dot(dy, v);
      },
      x);
  auto dx = dy;
  cpu::rope_backward(dx.data(), batch, heads, seq, head_dim, table);
  CHECK(relative_error(dx, numeric) <= finite_difference_tolerance);

  auto f32 = to_float(dy);  // f32 against f64, the same table
  cpu::rope_backward(f32.data(), batch, heads, seq, head_dim, table);
  CHECK(relative_error(f32, dx) <= float_tolerance);
}

TEST_CASE("rope_backward is the transpose of rope: finite differences, and it undoes rope", "[cpu]") {
  const int64_t batch = 2, heads = 2, seq = 4, head_dim = 6;
  for (double theta : {10000.0, 500000.0}) {
    for (int64_t offset : {int64_t(0), int64_t(37)}) {
      CAPTURE(theta, offset);
      const auto x = random_values(batch * heads * seq * head_dim, 21);
      const auto dy = random_values(x.size(), 22);
      const auto numeric = numeric_gradient(
          [&](vector v) {
            cpu::rope(v.data(), batch, heads, seq, head_dim, theta, offset);
            return dot(dy, v);
          },
          x);
      auto dx = dy;
      cpu::rope_backward(dx.data(), batch, heads, seq, head_dim, theta, offset);
      CHECK(relative_error(dx, numeric) <= finite_difference_tolerance);

      auto round_trip = x;  // a rotation's transpose is its inverse
      cpu::rope(round_trip.data(), batch, heads, seq, head_dim, theta, offset);
      cpu::rope_backward(round_trip.data(), batch, heads, seq, head_dim, theta, offset);
      CHECK(relative_error(round_trip, x) <= 1e-14);

      auto dx_float = to_float(dy);
      auto dx_rounded = rounded_to_float(dy);
      cpu::rope_backward(dx_float.data(), batch, heads, seq, head_dim, theta, offset);
      cpu::rope_backward(dx_rounded.data(), batch, heads, seq, head_dim, theta, offset);
      CHECK(relative_error(dx_float, dx_rounded) <= float_tolerance);
    }
  }
}

TEST_CASE("causal_attention_backward matches finite differences for MHA, GQA 4/2 and MQA 4/1", "[cpu]") {
  const int64_t batch = 2, heads = 4, seq = 5, head_dim = 4;
  for (int64_t kv_heads : {int64_t(4), int64_t(2), int64_t(1)}) {
    CAPTURE(kv_heads);
    const auto q = random_values(batch * heads * seq * head_dim, 23, -2, 2);
    const auto k = random_values(batch * kv_heads * seq * head_dim, 24, -2, 2);
    const auto v = random_values(batch * kv_heads * seq * head_dim, 25);
    const auto dout = random_values(q.size(), 26);
    auto loss = [&](const vector& q_, const vector& k_, const vector& v_) {
      vector out(q_.size());
      cpu::causal_attention(q_.data(), k_.data(), v_.data(), out.data(), batch, heads, kv_heads, seq,
                            head_dim);
      return dot(dout, out);
    };
    auto gradients = [&]<class T>(const std::vector<T>& q_, const std::vector<T>& k_,
                                  const std::vector<T>& v_, const std::vector<T>& dout_) {
      std::vector<T> dq(q_.size(), T(7)), dk(k_.size(), T(7)), dv(v_.size(), T(7));  // stale, overwritten
      cpu::causal_attention_backward(q_.data(), k_.data(), v_.data(), dout_.data(), dq.data(), dk.data(),
                                     dv.data(), batch, heads, kv_heads, seq, head_dim);
      return std::array{dq, dk, dv};
    };
    check_attention_gradients(q, k, v, dout, loss, gradients);
  }
}

TEST_CASE("causal_attention_backward: the last query's gradient reaches every key, the first's only key 0",
          "[cpu]") {
  const int64_t heads = 1, seq = 4, head_dim = 2;
  const auto q = random_values(seq * head_dim, 27);
  const auto k = random_values(seq * head_dim, 28);
  const auto v = random_values(seq * head_dim, 29);
  for (int64_t token : {int64_t(0), seq - 1}) {
    CAPTURE(token);
    vector dout(q.size(), 0.0);
    dout[std::size_t(token * head_dim)] = 1;
    vector dq(q.size()), dk(k.size()), dv(v.size());
    cpu::causal_attention_backward(q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(), dv.data(),
                                   1, heads, 1, seq, head_dim);
    for (int64_t t = 0; t < seq; ++t) {
      CAPTURE(t);
      const bool reached = dv[std::size_t(t * head_dim)] != 0;
      CHECK(reached == (t <= token));
    }
  }
}

TEST_CASE("embedding_backward scatter-adds into this rank's rows, and vocab shards cover the full gradient",
          "[cpu]") {
  const int64_t vocab = 10, cols = 3;
  const std::vector<std::int32_t> ids = {0, 9, 5, 6, 3, 6, -1, 10};  // 6 twice; -1 and 10 in no range
  const auto n = int64_t(ids.size());
  const auto table = random_values(vocab * cols, 30);
  const auto dout = random_values(n * cols, 31);
  const auto numeric = numeric_gradient(
      [&](const vector& v) {
        vector out(dout.size());
        cpu::embedding(ids.data(), v.data(), out.data(), n, vocab, cols, 0);
        return dot(dout, out);
      },
      table);
  vector dtable(table.size(), 0.0);
  cpu::embedding_backward(ids.data(), dout.data(), dtable.data(), n, vocab, cols, 0);
  CHECK(relative_error(dtable, numeric) <= finite_difference_tolerance);
  const auto once = dtable;
  cpu::embedding_backward(ids.data(), dout.data(), dtable.data(), n, vocab, cols, 0);
  CHECK(dtable == times(2, once));

  // Two ranks: rows [0, 6) and [6, 10). Each accumulates into its own rows only.
  const int64_t split = 6;
  const auto initial = random_values(vocab * cols, 32);
  auto shards = initial;
  cpu::embedding_backward(ids.data(), dout.data(), shards.data(), n, split, cols, 0);
  cpu::embedding_backward(ids.data(), dout.data(), shards.data() + split * cols, n, vocab - split, cols,
                          split);
  CHECK(relative_error(shards, plus(initial, numeric)) <= finite_difference_tolerance);

  std::vector<float> dtable_float(table.size(), 0.0f);
  vector dtable_rounded(table.size(), 0.0);
  const auto dout_float = to_float(dout);
  const auto dout_rounded = rounded_to_float(dout);
  cpu::embedding_backward(ids.data(), dout_float.data(), dtable_float.data(), n, vocab, cols, 0);
  cpu::embedding_backward(ids.data(), dout_rounded.data(), dtable_rounded.data(), n, vocab, cols, 0);
  CHECK(relative_error(dtable_float, dtable_rounded) <= float_tolerance);
}

TEST_CASE("position_embedding_backward sums dy over the batch into rows 0..seq-1, accumulating", "[cpu]") {
  const int64_t batch = 3, seq = 4, cols = 5, positions = seq + 2;
  const auto x = random_values(batch * seq * cols, 33);
  const auto table = random_values(positions * cols, 34);
  const auto dy = random_values(x.size(), 35);
  const auto numeric = numeric_gradient(
      [&](const vector& v) { return dot(dy, position_embedding(x, v, batch, seq, cols)); }, table);
  vector dtable(table.size(), 0.0);
  cpu::position_embedding_backward(dy.data(), dtable.data(), batch, seq, cols);
  CHECK(relative_error(dtable, numeric) <= finite_difference_tolerance);
  CHECK(std::all_of(dtable.begin() + seq * cols, dtable.end(), [](double g) { return g == 0; }));
  const auto once = dtable;
  cpu::position_embedding_backward(dy.data(), dtable.data(), batch, seq, cols);
  CHECK(dtable == times(2, once));

  std::vector<float> dtable_float(table.size(), 0.0f);
  vector dtable_rounded(table.size(), 0.0);
  cpu::position_embedding_backward(to_float(dy).data(), dtable_float.data(), batch, seq, cols);
  cpu::position_embedding_backward(rounded_to_float(dy).data(), dtable_rounded.data(), batch, seq, cols);
  CHECK(relative_error(dtable_float, dtable_rounded) <= float_tolerance);
}

TEST_CASE("cross_entropy_backward is (softmax - onehot) * scale, and 0 on ignore_index rows", "[cpu]") {
  const int64_t rows = 5, vocab = 7;
  const std::vector<std::int64_t> targets = {3, -100, 0, 6, -100};
  const double scale = 1.0 / 3;  // the mean over the 3 counted rows
  const auto logits = random_values(rows * vocab, 36, -3, 3);
  const auto numeric = numeric_gradient(
      [&](const vector& v) { return scale * cpu::cross_entropy_sum(v.data(), targets.data(), rows, vocab); },
      logits);
  vector dlogits(logits.size(), 7.0);
  cpu::cross_entropy_backward(logits.data(), targets.data(), dlogits.data(), rows, vocab, scale);
  CHECK(relative_error(dlogits, numeric) <= finite_difference_tolerance);
  for (int64_t i : {int64_t(1), int64_t(4)}) {
    CHECK(std::all_of(dlogits.begin() + i * vocab, dlogits.begin() + (i + 1) * vocab,
                      [](double g) { return g == 0; }));
  }

  auto in_place = logits;
  cpu::cross_entropy_backward(in_place.data(), targets.data(), in_place.data(), rows, vocab, scale);
  CHECK(in_place == dlogits);

  // Softmax ignores a shift of the logits: far from 0 the gradient is the same and finite.
  vector shifted = logits;
  for (auto& value : shifted) value += 1000;
  vector dshifted(logits.size());
  cpu::cross_entropy_backward(shifted.data(), targets.data(), dshifted.data(), rows, vocab, scale);
  CHECK(relative_error(dshifted, dlogits) <= 1e-9);

  const std::vector<std::int32_t> targets32 = {3, -100, 0, 6, -100};
  std::vector<float> dlogits_float(logits.size());
  vector dlogits_rounded(logits.size());
  cpu::cross_entropy_backward(to_float(shifted).data(), targets32.data(), dlogits_float.data(), rows, vocab,
                              scale);
  cpu::cross_entropy_backward(rounded_to_float(shifted).data(), targets32.data(), dlogits_rounded.data(),
                              rows, vocab, scale);
  CHECK(relative_error(dlogits_float, dlogits_rounded) <= float_tolerance);
}

TEST_CASE("cross_entropy_backward rejects a target outside the vocabulary before writing anything", "[cpu]") {
  const vector logits(2 * 4, 0.0);
  const std::vector<std::int64_t> targets = {1, 4};
  vector dlogits(logits.size(), 7.0);
  const auto message = thrown_message(
      [&] { cpu::cross_entropy_backward(logits.data(), targets.data(), dlogits.data(), 2, 4, 1.0); });
  CHECK(contains(
      message,
      "shardgraph: cpu::cross_entropy_backward: target 4 of row 1 is outside the vocabulary [0, 4)"));
  CHECK(dlogits == vector(logits.size(), 7.0));
  const std::vector<std::int64_t> good = {1, 2};
  CHECK(contains(thrown_message([&] {
                   cpu::cross_entropy_backward(logits.data(), good.data(), dlogits.data(), 2, 4,
                                               std::nan(""));
                 }),
                 "scale is infinite or NaN"));
}

TEST_CASE("cross_entropy_backward gives a padded vocabulary's columns and ignored rows no gradient", "[cpu]") {
  const int64_t rows = 4, classes = 5, vocab = 8;
  const std::vector<std::int64_t> targets = {4, 7, 0, 7};  // 7: this loss's ignore index, not a class
  const cpu::cross_entropy_targets which{.classes = classes, .ignore_index = 7};
  const double scale = 0.5;
  auto logits = random_values(rows * vocab, 37, -3, 3);
  for (int64_t i = 0; i < rows; ++i) logits[std::size_t(i * vocab + classes)] = 50;  // a padding column
  const auto numeric = numeric_gradient(
      [&](const vector& v) {
        return scale * cpu::cross_entropy_sum(v.data(), targets.data(), rows, vocab, nullptr, which);
      },
      logits);
  vector dlogits(logits.size(), 3.0);
  cpu::cross_entropy_backward(logits.data(), targets.data(), dlogits.data(), rows, vocab, scale, which);
  CHECK(relative_error(dlogits, numeric) <= finite_difference_tolerance);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < vocab; ++j) {
      CAPTURE(i, j);
      if (j >= classes || targets[std::size_t(i)] == 7) CHECK(dlogits[std::size_t(i * vocab + j)] == 0);
    }
  // each row's class columns sum to 0: the padding took no probability
  for (int64_t i : {int64_t(0), int64_t(2)}) {
    double sum = 0;
    for (int64_t j = 0; j < classes; ++j) sum += dlogits[std::size_t(i * vocab + j)];
    CHECK(std::abs(sum) <= 1e-15);
  }
  // a mean over no target divides by 0, but every row is ignored: the gradient is 0, not an error
  const std::vector<std::int64_t> all_ignored = {7, 7, 7, 7};
  cpu::cross_entropy_backward(logits.data(), all_ignored.data(), dlogits.data(), rows, vocab, std::numeric_limits<double>::infinity(), which);
  CHECK(dlogits == vector(dlogits.size(), 0.0));
}

TEST_CASE("split_heads and merge_heads are each other's transpose, so each is the other's backward",
          "[cpu]") {
  const int64_t batch = 2, seq = 3, heads = 2, head_dim = 4;
  const auto x = random_values(batch * seq * heads * head_dim, 37);
  const auto dy = random_values(x.size(), 38);
  vector split(x.size()), dx(x.size());
  cpu::split_heads(x.data(), split.data(), batch, seq, heads, head_dim);
  cpu::merge_heads(dy.data(), dx.data(), batch, seq, heads, head_dim);
  CHECK(std::abs(dot(dy, split) - dot(dx, x)) <= 1e-12);
}

TEST_CASE("the backward kernels reject bad sizes and missing buffers with a shardgraph error", "[cpu]") {
  vector buffer(64);
  double* p = buffer.data();
  CHECK(contains(thrown_message([&] { cpu::gemm_at_b(p, p, p, -1, 2, 2, false); }),
                 "shardgraph: cpu::gemm_at_b: m is -1, a negative size"));
  CHECK(contains(thrown_message([&] { cpu::gemm_at_b<double>(p, nullptr, p, 2, 2, 2, false); }),
                 "shardgraph: cpu::gemm_at_b: b is null"));
  CHECK(contains(thrown_message([&] { cpu::batched_gemm_at_b(p, p, p, -2, 1, 1, 1, false); }),
                 "cpu::batched_gemm_at_b: batch is -2"));
  CHECK(contains(thrown_message([&] { cpu::bias_backward<double>(p, nullptr, 2, 2); }),
                 "cpu::bias_backward: db is null"));
  CHECK(contains(thrown_message([&] { cpu::layer_norm_backward(p, p, p, p, p, p, 2, 0, 1e-5); }),
                 "cpu::layer_norm_backward: a row of 0 columns"));
  CHECK(contains(thrown_message([&] { cpu::rms_norm_backward(p, p, p, p, p, 2, 2, -1.0); }),
                 "cpu::rms_norm_backward: eps is negative"));
  CHECK(contains(thrown_message([&] { cpu::softmax_backward(p, p, p, 1, 0); }), "cpu::softmax_backward"));
  CHECK(contains(thrown_message([&] { cpu::rope_backward(p, 1, 1, 1, 3, 10000.0); }),
                 "cpu::rope_backward: head_dim 3 is odd"));
  CHECK(contains(thrown_message([&] { cpu::rope_backward(p, 1, 1, 1, 2, 0.0); }), "theta is not positive"));
  CHECK(contains(thrown_message([&] { cpu::causal_attention_backward(p, p, p, p, p, p, p, 1, 3, 2, 2, 2); }),
                 "shardgraph: cpu::causal_attention_backward: heads (3) is not a multiple of kv_heads (2)"));
  CHECK(contains(thrown_message([&] {
                   cpu::causal_attention_backward<double>(p, p, p, nullptr, p, p, p, 1, 2, 1, 2, 2);
                 }),
                 "cpu::causal_attention_backward: dout is null"));
  CHECK(contains(thrown_message([&] { cpu::embedding_backward<double, int>(nullptr, p, p, 2, 2, 2, 0); }),
                 "cpu::embedding_backward: ids is null"));
  CHECK(contains(thrown_message([&] { cpu::position_embedding_backward(p, p, 1, -1, 2); }),
                 "cpu::position_embedding_backward: seq is -1"));
  const std::vector<int> targets = {0};
  CHECK(contains(thrown_message([&] { cpu::cross_entropy_backward(p, targets.data(), p, -3, 1, 1.0); }),
                 "cpu::cross_entropy_backward: rows is -3"));
}
