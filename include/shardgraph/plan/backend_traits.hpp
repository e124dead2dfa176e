#pragma once
// backend_traits: what a compute backend runs beyond the ComputeBackend concept, as one value that
// the planning passes read (they are plain functions of values, not templates over the backend).
//
//   constexpr plan::backend_traits t = plan::traits_of<cpu::backend>();
//   t.views;              // view(buffer, offset, dtype, numel): values may share one arena
//
// The fused kinds come from the backend's traits type (compute/fused_kinds.hpp) and bind's options;
// the buffer abilities are read from its members.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "shardgraph/compute/fused_kinds.hpp"
#include "shardgraph/core/dtype.hpp"

namespace shardgraph::plan {

struct backend_traits {
  // The fused kinds the plan's fusion rewrite introduces (compute/fused_kinds.hpp): the core lowers
  // those the backend does not run (compute/lower_fused.hpp).
  compute::fused_set fused;
  // Buffer abilities.
  bool views = false;      // view(buffer, offset, dtype, numel): a buffer inside another's memory
  bool packs = false;      // copy_range(from, offset, to, offset, n) and fill_zero(buffer): buckets
  bool fills_zero = false;  // fill_zero(buffer): pipeline stages, gradient sums
  bool checks_finite = false;  // all_finite(buffer): the finite check
  // The backend's name (traits::name: "cpu", "cuda"), by which custom ops find their kernels
  // (ir/custom_op.hpp); empty when the traits do not say.
  std::string_view name{};
};

// The fused kinds the rewrite introduces for a backend running `runs`, of those `allowed`: every
// kind, lowered where the backend does not run it (the same plan for every backend), except the
// saved statistics (fused::attention_saved, cross_entropy_saved), whose buffers only a backend
// running them reads, and batched products unless the core can find their operands' strides and
// lower them (`strided`: Backend::address and buffers' at_offset).
constexpr compute::fused_set introduced_kinds(compute::fused_set runs, compute::fused_set allowed, bool strided) {
  using compute::fused;
  compute::fused_set kinds = allowed;
  for (fused k : {fused::attention_saved, fused::cross_entropy_saved})
    if (!runs.has(k)) kinds.remove(k);
  if (!strided) kinds.remove(fused::batched_products);
  return kinds;
}

// Whether the core can find a batched call's strides and lower it: Backend::address(buffer) and
// buffer::at_offset(bytes).
template <class Backend>
constexpr bool finds_strides() {
  using buffer = typename Backend::buffer;
  return requires(const buffer& b) {
    Backend::address(b);
    b.at_offset(std::size_t{0});
  };
}

template <class Backend>
constexpr backend_traits traits_of(compute::fused_set allowed = compute::fused_set::all()) {
  using buffer = typename Backend::buffer;
  backend_traits t;
  if constexpr (requires { Backend::traits::name; }) t.name = Backend::traits::name;
  t.fused = introduced_kinds(compute::fused_kinds_run_by<Backend>(), allowed, finds_strides<Backend>());
  t.views = requires(Backend& b, buffer& x) { b.view(x, std::size_t{0}, dtype::f32, std::int64_t{0}); };
  t.fills_zero = requires(Backend& b, buffer& x) { b.fill_zero(x); };
  t.packs = t.fills_zero && requires(Backend& b, buffer& x) { b.copy_range(x, 0, x, 0, 0); };
  t.checks_finite = requires(Backend& b, const buffer& x) {
    { b.all_finite(x) } -> std::convertible_to<bool>;
  };
  return t;
}

}  // namespace shardgraph::plan
