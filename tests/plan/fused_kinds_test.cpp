// The fused kinds a call carries (compute::fused_kinds_of, read from its operands) and those the
// fusion rewrite introduces for a backend (plan::introduced_kinds).
#include <shardgraph/compute/fused_kinds.hpp>
#include <shardgraph/plan/backend_traits.hpp>
#include <shardgraph/plan/compute_calls.hpp>

#include "catch.hpp"

namespace sg = shardgraph;
using sg::compute::fused;
using sg::compute::fused_set;
using sg::plan::bound_call;

TEST_CASE("fused kinds: a call's kinds are read from the operands it carries", "[plan][fusion]") {
  bound_call linear;
  linear.kernel = sg::op::linear;
  CHECK(sg::plan::fused_kinds_of(linear).empty());
  linear.bias = 3;
  linear.epilogue = sg::compute::product_epilogue::gelu;
  CHECK(sg::plan::fused_kinds_of(linear) == fused_set{fused::linear_bias, fused::linear_epilogue});
  linear.kind = sg::plan::call_kind::batched;
  CHECK(sg::plan::fused_kinds_of(linear).has(fused::batched_products));

  bound_call dq;
  dq.kernel = sg::op::attention_grad_q;
  dq.key_grad = 5;
  dq.value_grad = 6;
  dq.token_major = true;
  dq.side = 7;  // the forward's result, with its saved statistics
  dq.saved = 7;
  CHECK(sg::plan::fused_kinds_of(dq) ==
        fused_set{fused::attention_backward, fused::attention_token_major, fused::attention_saved});

  bound_call norm;
  norm.kernel = sg::op::layer_norm_grad_x;
  norm.weight_grad = 2;
  norm.bias_grad = 4;
  norm.epilogue = sg::compute::product_epilogue::add;
  CHECK(sg::plan::fused_kinds_of(norm) ==
        fused_set{fused::norm_backward, fused::norm_weight_grad_with_bias, fused::norm_grad_add});

  bound_call loss;
  loss.kernel = sg::op::cross_entropy;
  loss.logits_grad = 9;
  CHECK(sg::plan::fused_kinds_of(loss) == fused_set{fused::loss_with_gradient});
  bound_call gradient;  // a loss's gradient reading the statistics its loss saved
  gradient.kernel = sg::op::cross_entropy_grad;
  gradient.side = 8;
  gradient.saved = 1;
  CHECK(sg::plan::fused_kinds_of(gradient) == fused_set{fused::cross_entropy_saved});
  CHECK(sg::plan::fused_kinds_of(gradient).names() == "cross_entropy_saved");
}

TEST_CASE("fused kinds: the rewrite introduces every kind, saved statistics only for a backend running them",
          "[plan][fusion]") {
  const fused_set every = fused_set::all();
  // A backend running nothing: every kind but the saved statistics, and batched products only
  // where the core can find their strides (and lower them).
  CHECK(sg::plan::introduced_kinds({}, every, true) ==
        every.without({fused::attention_saved, fused::cross_entropy_saved}));
  CHECK(sg::plan::introduced_kinds({}, every, false) ==
        every.without({fused::attention_saved, fused::cross_entropy_saved, fused::batched_products}));
  CHECK(sg::plan::introduced_kinds(every, every, true) == every);
  // The options narrow it, whatever the backend runs.
  CHECK(sg::plan::introduced_kinds(every, {}, true).empty());
  CHECK(sg::plan::introduced_kinds(every, {fused::norm_backward}, true) == fused_set{fused::norm_backward});
  CHECK(fused_set{fused::norm_backward, fused::attention_backward}.names() == "attention_backward+norm_backward");
}
