#pragma once
// backend_traits: what a compute backend runs beyond the ComputeBackend concept, as one value that
// the planning passes read (they are plain functions of values, not templates over the backend).
//
//   constexpr plan::backend_traits t = plan::traits_of<cpu::backend>();
//   t.views;              // view(buffer, offset, dtype, numel): values may share one arena
//
// A backend declares each fused call it runs as `static constexpr bool <name> = true` (the flags
// of compute/compute_backend.hpp); the abilities below `views` are read from its members.
#include <cstddef>
#include <cstdint>

#include "shardgraph/core/dtype.hpp"

namespace shardgraph::plan {

struct backend_traits {
  // Fused calls (compute/compute_backend.hpp documents each).
  bool linear_bias_epilogue = false;
  bool linear_bias_grad_epilogue = false;
  bool norm_bias_grad_fused = false;
  bool linear_epilogues = false;
  bool norm_grad_add_epilogue = false;
  bool embedding_grad_add_epilogue = false;
  bool attention_token_major = false;
  bool attention_output_reuse = false;
  bool cross_entropy_statistics_kept = false;
  bool cross_entropy_gradient_with_loss = false;
  bool attention_gradients_together = false;
  bool norm_gradients_together = false;
  bool products_batched = false;
  // Buffer abilities.
  bool views = false;      // view(buffer, offset, dtype, numel): a buffer inside another's memory
  bool packs = false;      // copy_range(from, offset, to, offset, n) and fill_zero(buffer): buckets
  bool fills_zero = false;  // fill_zero(buffer): pipeline stages, gradient sums
  bool checks_finite = false;  // all_finite(buffer): the finite check
};

template <class Backend>
constexpr backend_traits traits_of() {
  using buffer = typename Backend::buffer;
  backend_traits t;
  t.linear_bias_epilogue = requires { requires Backend::linear_bias_epilogue; };
  t.linear_bias_grad_epilogue = requires { requires Backend::linear_bias_grad_epilogue; };
  t.norm_bias_grad_fused = requires { requires Backend::norm_bias_grad_fused; };
  t.linear_epilogues = requires { requires Backend::linear_epilogues; };
  t.norm_grad_add_epilogue = requires { requires Backend::norm_grad_add_epilogue; };
  t.embedding_grad_add_epilogue = requires { requires Backend::embedding_grad_add_epilogue; };
  t.attention_token_major = requires { requires Backend::attention_token_major; };
  t.attention_output_reuse = requires { requires Backend::attention_output_reuse; };
  t.cross_entropy_statistics_kept = requires { requires Backend::cross_entropy_statistics_kept; };
  t.cross_entropy_gradient_with_loss = requires { requires Backend::cross_entropy_gradient_with_loss; };
  t.attention_gradients_together = requires { requires Backend::attention_gradients_together; };
  t.norm_gradients_together = requires { requires Backend::norm_gradients_together; };
  t.products_batched = requires { requires Backend::products_batched; };
  t.views = requires(Backend& b, buffer& x) { b.view(x, std::size_t{0}, dtype::f32, std::int64_t{0}); };
  t.fills_zero = requires(Backend& b, buffer& x) { b.fill_zero(x); };
  t.packs = t.fills_zero && requires(Backend& b, buffer& x) { b.copy_range(x, 0, x, 0, 0); };
  t.checks_finite = requires(Backend& b, const buffer& x) {
    { b.all_finite(x) } -> std::convertible_to<bool>;
  };
  return t;
}

}  // namespace shardgraph::plan
