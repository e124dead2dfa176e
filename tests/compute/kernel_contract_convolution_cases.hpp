#pragma once
// The kernel contract's cases of the convolutions' layouts (compute/compute_backend.hpp's table):
// patchify and unfold1d against the index formulas of torch's Conv2d and Conv1d windows, written
// output by output, and their gradients against sums over those windows, read input by input.
// Include after kernel_contract_cases.hpp, with the same fixtures.
#include <array>
#include <cstdint>
#include <vector>

namespace kernel_contract {

// x (batch, channels, height, width) -> (batch, (height / patch) * (width / patch), channels * patch *
// patch): patch (i, j)'s feature (c, r, s) is pixel (c, i * patch + r, j * patch + s).
inline std::vector<double> reference_patchify(const std::vector<double>& x, std::int64_t batch,
                                              std::int64_t channels, std::int64_t height, std::int64_t width,
                                              std::int64_t patch) {
  std::vector<double> out;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < height / patch; ++i)
      for (std::int64_t j = 0; j < width / patch; ++j)
        for (std::int64_t c = 0; c < channels; ++c)
          for (std::int64_t r = 0; r < patch; ++r)
            for (std::int64_t s = 0; s < patch; ++s)
              out.push_back(
                  x[std::size_t(((b * channels + c) * height + i * patch + r) * width + j * patch + s)]);
  return out;
}

// One 1-D window: {kernel, stride, padding}.
struct window_1d {
  std::int64_t kernel, stride, padding;
  std::int64_t count(std::int64_t length) const { return (length + 2 * padding - kernel) / stride + 1; }
};

// x (batch, channels, length) -> (batch, length_out, channels * kernel): torch's conv1d reads
// x[b][c][t * stride - padding + k] for output t, 0 in the padding.
inline std::vector<double> reference_unfold1d(const std::vector<double>& x, std::int64_t batch,
                                              std::int64_t channels, std::int64_t length, window_1d w) {
  std::vector<double> out;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < w.count(length); ++t)
      for (std::int64_t c = 0; c < channels; ++c)
        for (std::int64_t k = 0; k < w.kernel; ++k) {
          const std::int64_t l = t * w.stride - w.padding + k;
          out.push_back(l >= 0 && l < length ? x[std::size_t((b * channels + c) * length + l)] : 0.0);
        }
  return out;
}

// The gradient of unfold1d: dx[b][c][l] sums dy[b][t][c * kernel + k] over every (t, k) whose
// window reads l, found input by input.
inline std::vector<double> reference_fold1d(const std::vector<double>& dy, std::int64_t batch,
                                            std::int64_t channels, std::int64_t length, window_1d w) {
  const std::int64_t windows = w.count(length);
  std::vector<double> dx;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t l = 0; l < length; ++l) {
        double sum = 0;
        for (std::int64_t k = 0; k < w.kernel; ++k) {
          const std::int64_t shifted = l + w.padding - k;  // = t * stride
          if (shifted >= 0 && shifted % w.stride == 0 && shifted / w.stride < windows)
            sum += dy[std::size_t(((b * windows + shifted / w.stride) * channels + c) * w.kernel + k)];
        }
        dx.push_back(sum);
      }
  return dx;
}

}  // namespace kernel_contract

TEMPLATE_LIST_TEST_CASE(
    "kernel contract: patchify and unpatchify move pixels to and from (batch, patches, features)",
    "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const std::int64_t batch = 2, channels = 3, height = 4, width = 6, patch = 2,
                     numel = batch * channels * height * width;
  std::vector<double> x(static_cast<std::size_t>(numel));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i);
  const std::vector<double> rows = reference_patchify(x, batch, channels, height, width, patch);
  for (const dtype t : contract_dtypes) {
    CAPTURE(sg::dtype_name(t));
    for (const op kind : {op::patchify, op::unpatchify}) {
      CAPTURE(sg::op_name(kind));
      CHECK(error_of_call<F>(
                t, numel, {host_tensor{t, kind == op::patchify ? x : rows}},
                [&](auto& call, auto&) {
                  call.kind = kind;
                  set_dims(call, {batch, channels, height, width, patch});
                },
                kind == op::patchify ? rows : x) == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("kernel contract: unfold1d and fold1d match torch's conv1d windows and their sums",
                        "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const std::int64_t batch = 2, channels = 3, length = 7;
  for (const window_1d w : {window_1d{3, 1, 1}, window_1d{3, 2, 1}, window_1d{2, 3, 0}, window_1d{5, 2, 2}}) {
    CAPTURE(w.kernel, w.stride, w.padding);
    const std::int64_t rows = batch * w.count(length) * channels * w.kernel;
    for (const dtype t : contract_dtypes) {
      CAPTURE(sg::dtype_name(t));
      const host_tensor x = random_tensor(t, batch * channels * length, 7);
      const host_tensor dy = random_tensor(t, rows, 8);
      const auto describe = [&](op kind) {
        return [&, kind](auto& call, auto&) {
          call.kind = kind;
          set_dims(call, {batch, channels, length, w.kernel, w.stride, w.padding});
        };
      };
      CHECK(error_of_call<F>(t, rows, {x}, describe(op::unfold1d),
                             reference_unfold1d(stored(x), batch, channels, length, w)) == 0);
      CHECK(error_of_call<F>(t, batch * channels * length, {dy}, describe(op::fold1d),
                             reference_fold1d(stored(dy), batch, channels, length, w)) <= bound_of<F>(t));
    }
  }
}
