// cuda::gemm_runner against a double-precision reference on the host: y = x w (+ bias) (then GELU,
// tanh form), row-major, for f32 (exact to f32 rounding: no TF32) and bf16 (f32 accumulation, one
// rounding of the output), at aligned, odd and vector (m = 1) sizes. A GPU test: skipped without one.
#include <shardgraph/core/half_types.hpp>
#include <shardgraph/cuda.hpp>
#include <shardgraph/cuda/gemm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "catch.hpp"

namespace sg = shardgraph;
using sg::cuda::element;
using sg::cuda::epilogue;

namespace {

double gelu(double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }

std::vector<float> values(std::int64_t n, std::uint32_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<float>((seed >> 8) % 2001) / 1000.0f - 1.0f;  // [-1, 1]
  }
  return v;
}

template <class T>
sg::cuda::device_buffer to_device(const std::vector<float>& v) {
  std::vector<T> t;
  for (float x : v) t.push_back(T(x));
  sg::cuda::device_buffer b(t.size() * sizeof(T));
  b.upload(t.data());
  return b;
}

template <class T>
std::vector<float> to_host(const sg::cuda::device_buffer& b, std::size_t n) {
  std::vector<T> t(n);
  b.download(t.data());
  std::vector<float> v;
  for (const T& x : t) v.push_back(static_cast<float>(x));
  return v;
}

// The largest |got - want| over max |want|, with want computed in double from the inputs as the
// GPU sees them (already rounded to T).
template <class T>
double run_and_compare(const sg::cuda::gemm_shape& s) {
  auto round = [](std::vector<float> v) {
    for (float& x : v) x = static_cast<float>(T(x));
    return v;
  };
  const std::vector<float> x = round(values(s.m * s.k, 1)), w = round(values(s.k * s.n, 2)),
                           bias = round(values(s.n, 3));
  auto dx = to_device<T>(x), dw = to_device<T>(w), db = to_device<T>(bias);
  sg::cuda::device_buffer dy(static_cast<std::size_t>(s.m * s.n) * sizeof(T));
  sg::cuda::gemm_runner gemm;
  gemm.run(s, dx.data(), dw.data(), db.data(), dy.data());
  sg::cuda::check_cuda(cudaDeviceSynchronize(), "gemm_test (cudaDeviceSynchronize)");
  const std::vector<float> y = to_host<T>(dy, static_cast<std::size_t>(s.m * s.n));
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < s.m; ++i)
    for (std::int64_t j = 0; j < s.n; ++j) {
      double want = 0;
      for (std::int64_t p = 0; p < s.k; ++p)
        want += static_cast<double>(x[static_cast<std::size_t>(i * s.k + p)]) *
                w[static_cast<std::size_t>(p * s.n + j)];
      if (s.post == epilogue::bias || s.post == epilogue::bias_gelu)
        want += bias[static_cast<std::size_t>(j)];
      if (s.post == epilogue::gelu || s.post == epilogue::bias_gelu) want = gelu(want);
      diff = std::max(diff, std::abs(y[static_cast<std::size_t>(i * s.n + j)] - want));
      scale = std::max(scale, std::abs(want));
    }
  return diff / scale;
}

double gelu_slope(double v) {
  const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (v + 0.044715 * v * v * v));
  return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v);
}

// The epilogues with a second matrix, through matmul_problem: gelu_aux and bias_gelu_aux (y and
// the pre-activation aux, both checked), gelu_grad (y = x w * gelu'(aux), aux given), with the
// bias gradient (y's column sums, checked apart: their scale is the rows') and an addend
// (y = x w + bias + r, beta 1). The largest relative error of y and aux, as run_and_compare's.
template <class T>
double epilogue_error(std::int64_t m, std::int64_t n, std::int64_t k, element type, epilogue post,
                      bool addend) {
  auto round = [](std::vector<float> v) {
    for (float& x : v) x = static_cast<float>(T(x));
    return v;
  };
  const std::vector<float> x = round(values(m * k, 1)), w = round(values(k * n, 2)),
                           bias = round(values(n, 3)), given = round(values(m * n, 4));
  auto dx = to_device<T>(x), dw = to_device<T>(w), db = to_device<T>(bias), dgiven = to_device<T>(given);
  const auto mn = static_cast<std::size_t>(m * n);
  sg::cuda::device_buffer dy(mn * sizeof(T)), daux(mn * sizeof(T));
  const bool writes_aux = post == epilogue::gelu_aux || post == epilogue::bias_gelu_aux;
  sg::cuda::epilogue_operands e{.bias = db.data(), .aux = writes_aux ? daux.data() : dgiven.data()};
  sg::cuda::matmul_problem p{
      .m = m, .n = n, .k = k, .a_type = type, .b_type = type, .c_type = type, .post = post};
  if (addend) {
    p.beta = 1;
    e.addend = dgiven.data();
  }
  sg::cuda::gemm_runner gemm;
  gemm.run(p, dx.data(), dw.data(), dy.data(), e, nullptr, "gemm_test");
  sg::cuda::check_cuda(cudaDeviceSynchronize(), "gemm_test (cudaDeviceSynchronize)");
  const std::vector<float> y = to_host<T>(dy, mn), aux = to_host<T>(daux, mn),
                           sums = to_host<T>(db, static_cast<std::size_t>(n));
  const bool writes_sums = post == epilogue::gelu_grad_bias_grad;
  std::vector<double> want_sums(static_cast<std::size_t>(n));
  double diff = 0, scale = 0;
  auto compare = [&](double got, double want) {
    diff = std::max(diff, std::abs(got - want));
    scale = std::max(scale, std::abs(want));
  };
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const auto at = static_cast<std::size_t>(i * n + j);
      double want = 0;
      for (std::int64_t q = 0; q < k; ++q)
        want += static_cast<double>(x[static_cast<std::size_t>(i * k + q)]) *
                w[static_cast<std::size_t>(q * n + j)];
      if (post == epilogue::bias || post == epilogue::bias_gelu_aux)
        want += bias[static_cast<std::size_t>(j)];
      if (addend) want += given[at];
      if (writes_aux) {
        compare(aux[at], want);
        want = gelu(want);
      }
      if (post == epilogue::gelu_grad || writes_sums) want *= gelu_slope(given[at]);
      compare(y[at], want);
      want_sums[static_cast<std::size_t>(j)] += want;
    }
  if (!writes_sums) return diff / scale;
  const double error = diff / scale;
  diff = scale = 0;
  for (std::int64_t j = 0; j < n; ++j)
    compare(sums[static_cast<std::size_t>(j)], want_sums[static_cast<std::size_t>(j)]);
  return std::max(error, diff / scale);
}

}  // namespace

TEST_CASE(
    "cuda gemm: GELU keeping its input, GELU's gradient (with the bias gradient) and an addend, against "
    "double",
    "[cuda][gpu]") {
  struct size {
    std::int64_t m, n, k;
  };
  for (size z : {size{64, 128, 96}, size{40, 72, 24}, size{256, 768, 3072}}) {
    for (epilogue e :
         {epilogue::gelu_aux, epilogue::bias_gelu_aux, epilogue::gelu_grad, epilogue::gelu_grad_bias_grad}) {
      CAPTURE(z.m, z.n, z.k, static_cast<int>(e));
      CHECK(epilogue_error<float>(z.m, z.n, z.k, element::f32, e, false) < 1e-5);
      CHECK(epilogue_error<sg::bfloat16>(z.m, z.n, z.k, element::bf16, e, false) < 1e-2);
    }
    CAPTURE(z.m, z.n, z.k);
    CHECK(epilogue_error<float>(z.m, z.n, z.k, element::f32, epilogue::bias, true) < 1e-5);
    CHECK(epilogue_error<sg::bfloat16>(z.m, z.n, z.k, element::bf16, epilogue::bias, true) < 1e-2);
    CHECK(epilogue_error<sg::bfloat16>(z.m, z.n, z.k, element::bf16, epilogue::none, true) < 1e-2);
  }
}

TEST_CASE("cuda gemm: x w + bias with GELU, f32 and bf16, against double", "[cuda][gpu]") {
  struct size {
    std::int64_t m, n, k;
  };
  for (size z : {size{64, 128, 96}, size{1, 3072, 768}, size{37, 72, 24}, size{256, 768, 3072}})
    for (epilogue e : {epilogue::none, epilogue::bias, epilogue::gelu, epilogue::bias_gelu}) {
      CAPTURE(z.m, z.n, z.k, static_cast<int>(e));
      CHECK(run_and_compare<float>({z.m, z.n, z.k, element::f32, e}) < 1e-5);
      CHECK(run_and_compare<sg::bfloat16>({z.m, z.n, z.k, element::bf16, e}) < 1e-2);  // output rounding 2^-8
    }
}

TEST_CASE("cuda gemm: bad shapes, a missing bias and too many answers to time are errors", "[cuda][gpu]") {
  sg::cuda::gemm_runner gemm;
  sg::cuda::device_buffer b(64);
  CHECK_THAT(sg::testing::error_of([&] {
               gemm.run({0, 4, 4, element::f32, epilogue::none}, b.data(), b.data(), nullptr, b.data());
             }),
             sg::testing::ContainsSubstring("every dimension must be at least 1"));
  CHECK_THAT(sg::testing::error_of([&] {
               gemm.run({2, 2, 2, element::f32, epilogue::bias}, b.data(), b.data(), nullptr, b.data());
             }),
             sg::testing::ContainsSubstring("the epilogue reads or writes a bias but no bias was given"));
  CHECK_THAT(sg::testing::error_of([&] { sg::cuda::gemm_runner wide(sg::cuda::gemm_choice::timed, 40); }),
             sg::testing::ContainsSubstring("the number of cuBLASLt answers to time is 40"));
}

TEST_CASE("cuda gemm: a plan per shape and alignment, right for unaligned pointers too", "[cuda][gpu]") {
  // y = x w for m = 8, n = 8, k = 8 in f32 with every input element 1: each output is 8.
  sg::cuda::gemm_runner gemm;
  const std::vector<float> ones(8 * 8 + 1, 1.0f);
  sg::cuda::device_buffer x(ones.size() * sizeof(float)), w(ones.size() * sizeof(float)),
      y(ones.size() * sizeof(float));
  x.upload(ones.data());
  w.upload(ones.data());
  const sg::cuda::gemm_shape s{8, 8, 8, element::f32, epilogue::none};
  auto result = [&] {
    std::vector<float> got(ones.size());
    sg::cuda::check_cuda(cudaDeviceSynchronize(), "gemm_test (cudaDeviceSynchronize)");
    y.download(got.data());
    return got;
  };
  gemm.run(s, x.data(), w.data(), nullptr, y.data());
  gemm.run(s, x.data(), w.data(), nullptr, y.data());
  CHECK(gemm.plans() == 1);
  CHECK(result()[0] == 8.0f);
  // The same shape at pointers 4 bytes past 256-byte alignment: a second plan, the same values.
  auto* x4 = static_cast<std::byte*>(x.data()) + 4;
  auto* y4 = static_cast<std::byte*>(y.data()) + 4;
  gemm.run(s, x4, w.data(), nullptr, y4);
  CHECK(gemm.plans() == 2);
  const std::vector<float> shifted = result();
  for (std::size_t i = 1; i <= 64; ++i) CHECK(shifted[i] == 8.0f);
  gemm.run({8, 16, 4, element::f32, epilogue::none}, x.data(), w.data(), nullptr, y.data());
  CHECK(gemm.plans() == 3);
}

TEST_CASE("cuda gemm: the timed choice times products it may repeat, and adds to C once", "[cuda][gpu]") {
  // y += x w in place (beta 1, no addend): x and w all 1/4 (exact in bf16), y all 1, so each output
  // is 1 + k/16 = 17 after one product and 33 after two. Timing would run it several times: a
  // product adding to C itself takes the heuristic's first answer instead, untimed.
  const std::int64_t m = 256, n = 768, k = 256;
  const std::vector<sg::bfloat16> quarter(static_cast<std::size_t>(std::max(m, n) * k), sg::bfloat16(0.25f)),
      one(static_cast<std::size_t>(m * n), sg::bfloat16(1.0f));
  sg::cuda::device_buffer x(quarter.size() * 2), w(quarter.size() * 2), y(one.size() * 2);
  x.upload(quarter.data());
  w.upload(quarter.data());
  y.upload(one.data());
  const sg::cuda::matmul_problem add{.m = m,
                                     .n = n,
                                     .k = k,
                                     .a_type = element::bf16,
                                     .b_type = element::bf16,
                                     .c_type = element::bf16,
                                     .beta = 1};
  sg::cuda::gemm_runner timed(sg::cuda::gemm_choice::timed);
  timed.run(add, x.data(), w.data(), y.data(), nullptr, nullptr, "gemm_test");
  std::vector<sg::bfloat16> got(one.size());
  sg::cuda::check_cuda(cudaDeviceSynchronize(), "gemm_test (cudaDeviceSynchronize)");
  y.download(got.data());
  CHECK(static_cast<float>(got.front()) == 17.0f);
  CHECK(static_cast<float>(got.back()) == 17.0f);
  CHECK(timed.choices().plans.empty());
  // Written afresh (beta 0), the product is timed among cuBLASLt's answers (it gives several for
  // bf16 at these sizes) and the chosen one's result is the product's.
  timed.run({m, n, k, element::bf16, epilogue::none}, x.data(), w.data(), nullptr, y.data());
  sg::cuda::check_cuda(cudaDeviceSynchronize(), "gemm_test (cudaDeviceSynchronize)");
  y.download(got.data());
  CHECK(static_cast<float>(got.front()) == 16.0f);
  CHECK(static_cast<float>(got.back()) == 16.0f);
  CHECK(timed.choices().plans.size() == 1);
  CHECK(timed.choices().chosen_ms() <= timed.choices().first_ms());
  sg::cuda::gemm_runner first(sg::cuda::gemm_choice::heuristic);
  first.run({m, n, k, element::bf16, epilogue::none}, x.data(), w.data(), nullptr, y.data());
  CHECK(first.choices().plans.empty());
}
