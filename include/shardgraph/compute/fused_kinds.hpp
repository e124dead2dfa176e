#pragma once
// Fused kinds: calls that stand for several steps of a rank's program. The plan's fusion rewrite
// (plan/plan_step_fusion.hpp) introduces them; a compute backend declares those its kernels run
// through its traits type; the core lowers every other one into the calls it stands for
// (compute/lower_fused.hpp) before the backend sees it.
//
//   struct my_backend {
//     struct traits {  // optional: without it a backend runs no fused kind
//       static constexpr compute::fused_set runs{compute::fused::attention_backward};
//     };
//     ...
//   };
//   compute::fused_kinds_run_by<my_backend>().has(compute::fused::attention_backward);   // true
//
// What each kind's kernel_call carries (compute/compute_backend.hpp documents the fields):
//   linear_bias                 linear + its add_bias: `bias`
//   linear_epilogue             linear + the GELU, GELU gradient or add after it: `epilogue`, `side`
//   weight_grad_with_bias       linear_weight_grad + the bias_grad of the same dy: `bias_grad`
//   norm_weight_grad_with_bias  layer_norm_grad_w (or a norm_backward) + the bias_grad: `bias_grad`
//   norm_grad_add               layer_norm_grad_x / rms_norm_grad_x + the add after it: `epilogue`
//   embedding_grad_add          embedding_grad + the add of a tied table's other gradient: `epilogue`
//   attention_token_major       split_heads + attention (or a gradient) + merge_heads: `token_major`
//   attention_saved             attention writes its rows' log-sum-exp (`saved`) and its result stays
//                               (`output_kept`); its gradients read both (`saved`, `side`)
//   cross_entropy_saved         cross_entropy writes its rows' log-sum-exp (`saved`); the gradient of
//                               the same logits reads it (`saved`, `side`: the loss)
//   loss_with_gradient          cross_entropy + cross_entropy_grad for a seed of 1: `logits_grad`
//   attention_backward          attention_grad_q + _k + _v, three outputs: `key_grad`, `value_grad`
//   norm_backward               a norm's input gradient + its weight gradient: `weight_grad`
//   batched_products            linear (or linear_weight_grad) products of one input: `batch`
#include <cstdint>
#include <initializer_list>
#include <string>

#include "shardgraph/ir/op.hpp"

namespace shardgraph::compute {

enum class fused : std::uint8_t {
  linear_bias,
  linear_epilogue,
  weight_grad_with_bias,
  norm_weight_grad_with_bias,
  norm_grad_add,
  embedding_grad_add,
  attention_token_major,
  attention_saved,
  cross_entropy_saved,
  loss_with_gradient,
  attention_backward,
  norm_backward,
  batched_products,
  count_,
};

inline constexpr int fused_kind_count = static_cast<int>(fused::count_);

constexpr const char* fused_name(fused k) {
  switch (k) {
    case fused::linear_bias: return "linear_bias";
    case fused::linear_epilogue: return "linear_epilogue";
    case fused::weight_grad_with_bias: return "weight_grad_with_bias";
    case fused::norm_weight_grad_with_bias: return "norm_weight_grad_with_bias";
    case fused::norm_grad_add: return "norm_grad_add";
    case fused::embedding_grad_add: return "embedding_grad_add";
    case fused::attention_token_major: return "attention_token_major";
    case fused::attention_saved: return "attention_saved";
    case fused::cross_entropy_saved: return "cross_entropy_saved";
    case fused::loss_with_gradient: return "loss_with_gradient";
    case fused::attention_backward: return "attention_backward";
    case fused::norm_backward: return "norm_backward";
    case fused::batched_products: return "batched_products";
    case fused::count_: break;
  }
  return "?";
}

// A set of fused kinds.
class fused_set {
 public:
  constexpr fused_set() = default;
  constexpr fused_set(std::initializer_list<fused> kinds) {
    for (fused k : kinds) bits_ |= bit(k);
  }
  static constexpr fused_set all() {
    fused_set s;
    s.bits_ = (std::uint32_t{1} << fused_kind_count) - 1;
    return s;
  }

  constexpr bool has(fused k) const { return (bits_ & bit(k)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr fused_set& add(fused k) { return bits_ |= bit(k), *this; }
  constexpr fused_set& remove(fused k) { return bits_ &= ~bit(k), *this; }
  // The kinds of this set that `other` lacks.
  constexpr fused_set without(fused_set other) const {
    fused_set s;
    s.bits_ = bits_ & ~other.bits_;
    return s;
  }
  constexpr fused_set both(fused_set other) const {
    fused_set s;
    s.bits_ = bits_ & other.bits_;
    return s;
  }
  friend constexpr bool operator==(fused_set, fused_set) = default;

  // "attention_backward+norm_backward" ("" for none).
  std::string names() const {
    std::string text;
    for (int k = 0; k < fused_kind_count; ++k)
      if (has(static_cast<fused>(k))) text += (text.empty() ? "" : "+") + std::string(fused_name(static_cast<fused>(k)));
    return text;
  }

 private:
  static constexpr std::uint32_t bit(fused k) { return std::uint32_t{1} << static_cast<int>(k); }
  std::uint32_t bits_ = 0;
};

// The fused kinds a backend's kernels run: Backend::traits::runs, none without it.
template <class Backend>
constexpr fused_set fused_kinds_run_by() {
  if constexpr (requires { Backend::traits::runs; })
    return fused_set{Backend::traits::runs};
  else
    return {};
}

// The fused kinds a call (a compute::kernel_call, or a plan::bound_call through the same names)
// carries: `kind` is its op; `has(field)` says whether an operand field is set.
template <class Call, class Has>
constexpr fused_set fused_kinds_of(const Call& c, op kind, Has&& has, bool batched) {
  using epilogue = decltype(c.epilogue);
  fused_set s;
  const bool norm_x = kind == op::layer_norm_grad_x || kind == op::rms_norm_grad_x;
  const bool attention = kind == op::attention || kind == op::attention_grad_q || kind == op::attention_grad_k ||
                         kind == op::attention_grad_v;
  const bool adds = c.epilogue == epilogue::add;
  if (kind == op::linear && has(c.bias)) s.add(fused::linear_bias);
  if (kind == op::linear && c.epilogue != epilogue::none) s.add(fused::linear_epilogue);
  if (kind == op::linear_weight_grad && has(c.bias_grad)) s.add(fused::weight_grad_with_bias);
  if ((kind == op::layer_norm_grad_w || norm_x) && has(c.bias_grad)) s.add(fused::norm_weight_grad_with_bias);
  if (norm_x && adds) s.add(fused::norm_grad_add);
  if (kind == op::embedding_grad && adds) s.add(fused::embedding_grad_add);
  if (c.token_major) s.add(fused::attention_token_major);
  const bool saves = c.output_kept || has(c.saved);
  if (attention && (saves || has(c.side))) s.add(fused::attention_saved);
  if ((kind == op::cross_entropy && saves) || (kind == op::cross_entropy_grad && (saves || has(c.side))))
    s.add(fused::cross_entropy_saved);
  if (has(c.logits_grad)) s.add(fused::loss_with_gradient);
  if (has(c.key_grad)) s.add(fused::attention_backward);
  if (has(c.weight_grad)) s.add(fused::norm_backward);
  if (batched) s.add(fused::batched_products);
  return s;
}

}  // namespace shardgraph::compute
