#pragma once
// The kernel contract of the ops along one dimension (compute/compute_backend.hpp: concat, slice,
// slice_grad, sum, mean, broadcast), each tensor seen as (outer, n, inner), against index loops
// written here. Include after kernel_contract_cases.hpp (its error_of_call and bound_of).
#include <array>
#include <vector>

#include "catch.hpp"

namespace kernel_contract {

// x (outer, n, inner)'s element (o, j, i).
inline double at(const std::vector<double>& x, std::int64_t n, std::int64_t inner, std::int64_t o, std::int64_t j,
                 std::int64_t i) {
  return x[static_cast<std::size_t>((o * n + j) * inner + i)];
}

}  // namespace kernel_contract

TEMPLATE_LIST_TEST_CASE("kernel contract: concat joins three parts, slice and slice_grad take and place one",
                        "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const std::int64_t outer = 2, inner = 5;
  const std::array<std::int64_t, 3> n{1, 3, 2};
  const std::int64_t total = n[0] + n[1] + n[2], start = 1, size = 3;
  for (const dtype t : contract_dtypes) {
    CAPTURE(sg::dtype_name(t));
    std::vector<host_tensor> parts;
    for (std::size_t k = 0; k < n.size(); ++k) parts.push_back(random_tensor(t, outer * n[k] * inner, 30 + unsigned(k)));
    std::vector<double> joined;
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::size_t k = 0; k < n.size(); ++k)
        for (std::int64_t j = 0; j < n[k]; ++j)
          for (std::int64_t i = 0; i < inner; ++i) joined.push_back(at(stored(parts[k]), n[k], inner, o, j, i));
    CHECK(error_of_call<F>(
              t, outer * total * inner, parts,
              [&](auto& call, auto&) {
                call.kind = op::concat;
                set_dims(call, {outer, inner, n[0], n[1], n[2], 0});
              },
              joined) == 0);
    // slice [start, start + size) of x (outer, total, inner), and that slice placed back in zeros
    const host_tensor x = random_tensor(t, outer * total * inner, 40);
    std::vector<double> taken, placed;
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < total; ++j)
        for (std::int64_t i = 0; i < inner; ++i) {
          const bool inside = j >= start && j < start + size;
          if (inside) taken.push_back(at(stored(x), total, inner, o, j, i));
          placed.push_back(inside ? at(stored(x), total, inner, o, j, i) : 0.0);
        }
    CHECK(error_of_call<F>(
              t, outer * size * inner, {x},
              [&](auto& call, auto&) {
                call.kind = op::slice;
                set_dims(call, {outer, total, inner, start, size});
              },
              taken) == 0);
    CHECK(error_of_call<F>(
              t, outer * total * inner, {host_tensor{t, taken}},
              [&](auto& call, auto&) {
                call.kind = op::slice_grad;
                set_dims(call, {outer, total, inner, start, size});
              },
              placed) == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("kernel contract: sum and mean reduce the middle dimension, broadcast repeats it",
                        "[compute]", kernel_backends) {
  using F = TestType;
  using namespace kernel_contract;
  const std::int64_t outer = 3, n = 4, inner = 5;
  for (const dtype t : contract_dtypes)
    for (const std::int64_t divisor : {std::int64_t{1}, std::int64_t{8}}) {  // 8: a mean over 2 ranks' slices
      CAPTURE(sg::dtype_name(t), divisor);
      const host_tensor x = random_tensor(t, outer * n * inner, 50);
      std::vector<double> reduced;
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t i = 0; i < inner; ++i) {
          double s = 0;
          for (std::int64_t j = 0; j < n; ++j) s += at(stored(x), n, inner, o, j, i);
          reduced.push_back(s / static_cast<double>(divisor));
        }
      for (const op kind : {op::sum, op::mean})
        CHECK(error_of_call<F>(
                  t, outer * inner, {x},
                  [&](auto& call, auto&) {
                    call.kind = kind;
                    set_dims(call, {outer, n, inner, divisor});
                  },
                  reduced) <= bound_of<F>(t));
      const host_tensor y = random_tensor(t, outer * inner, 51);
      std::vector<double> repeated;
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t j = 0; j < n; ++j)
          for (std::int64_t i = 0; i < inner; ++i)
            repeated.push_back(stored(y)[static_cast<std::size_t>(o * inner + i)] / static_cast<double>(divisor));
      CHECK(error_of_call<F>(
                t, outer * n * inner, {y},
                [&](auto& call, auto&) {
                  call.kind = op::broadcast;
                  set_dims(call, {outer, n, inner, divisor});
                },
                repeated) <= bound_of<F>(t));
    }
}
