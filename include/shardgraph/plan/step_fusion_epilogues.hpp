#pragma once
// Step fusion: what a product's call writes besides its product (its epilogue). Three passes, run in
// this order: a linear's bias, a bias gradient written with a weight gradient, and an elementwise
// step after a product (compute::product_epilogue).
#include "shardgraph/plan/step_fusion_state.hpp"

namespace shardgraph::plan::detail {

// linear -> add_bias pairs whose bias the backend adds in the product's epilogue
// (linear_bias_epilogue): the linear's plain product is read by nothing else, so the linear writes
// x w + b straight into the add_bias node's value, and the chain starting at that add_bias skips it.
// An add_bias step of its own (as before split_heads or gelu) is taken over by the linear.
inline void plan_bias_epilogues(fusion_state& s) {
  if (!s.introduces(compute::fused::linear_bias)) return;
  const graph_view& g = s.nodes();
  for (const step& st : s.steps()) {
    const bool chain = st.kind == step_kind::fused;
    if (!chain && !(st.kind == step_kind::compute && g[st.node].kind == op::add_bias)) continue;
    const int j = chain ? st.first : st.node;
    const node& n = g[j];
    if (n.kind != op::add_bias || n.input_count != 2) continue;
    const int product = n.inputs[0];
    if (g[product].kind != op::linear || s.readers(product).size() != 1) continue;
    if (g[product].type != n.type || g[n.inputs[1]].type != n.type) continue;
    s.plan.bias_epilogue_of[at(product)] = j;
    s.plan.bias_done_by_product[at(j)] = true;
    s.take_over(j, product);
  }
}

// bias_grad -> linear_weight_grad pairs reading the same output gradient dy
// (fused::weight_grad_with_bias): the weight product also writes the bias gradient (cuBLASLt sums dy's
// rows in its epilogue as it reads them). The product's step comes later (autodiff emits the bias's
// gradient first), so the pair is taken only when nothing reads the bias gradient in between; its
// value is then written at the product's step.
// Likewise bias_grad -> layer_norm_grad_w pairs (a layer norm's bias and weight gradients), for
// fused::norm_weight_grad_with_bias: the norm's weight gradient comes first, so the bias
// gradient is written earlier than its own step, where nothing can have read it yet.
inline void plan_bias_grad_epilogues(fusion_state& s) {
  const bool products = s.introduces(compute::fused::weight_grad_with_bias);
  const bool norms = s.introduces(compute::fused::norm_weight_grad_with_bias);
  if (!products && !norms) return;
  const graph_view& g = s.nodes();
  for (int j = 0; j < g.size(); ++j) {
    if (g[j].kind != op::bias_grad || !s.computed_alone(j)) continue;
    const int dy = g[j].inputs[0];
    for (int k : s.readers(dy)) {
      const bool product = products && g[k].kind == op::linear_weight_grad;
      const bool norm = norms && g[k].kind == op::layer_norm_grad_w;
      if ((!product && !norm) || g[k].inputs[1] != dy || s.plan.bias_grad_of[at(k)] >= 0 ||
          !s.computed_alone(k) || g[k].region != g[j].region || g[k].type != g[j].type)
        continue;
      const std::size_t weight_step = s.step_of(k);
      if (product && weight_step < s.step_of(j)) continue;
      bool read_between = false;
      for (int r : s.readers(j)) read_between = read_between || s.step_of(r) <= weight_step;
      if (read_between) continue;
      s.plan.bias_grad_of[at(k)] = j;
      s.take_over(j, k, weight_step);
      break;
    }
  }
}

// Whether `kind`'s call can add a value to its result (the `add` epilogue).
inline bool adds_after(const backend_traits& t, op kind) {
  using compute::fused;
  return (t.fused.has(fused::linear_epilogue) && kind == op::linear) ||
         (t.fused.has(fused::norm_grad_add) && (kind == op::layer_norm_grad_x || kind == op::rms_norm_grad_x)) ||
         (t.fused.has(fused::embedding_grad_add) && kind == op::embedding_grad);
}

// The value elementwise step `st` reads that a product's call writes: an add_bias whose bias the
// product added, or the product itself (-1: none). A fused step is that add_bias and its node,
// nothing more; of an add's two inputs it is the one computed last (the other must be there before).
inline int product_written_input(const fusion_state& s, const step& st) {
  const graph_view& g = s.nodes();
  const bool linears = s.introduces(compute::fused::linear_epilogue);
  const int k = st.node;
  const node& n = g[k];
  if (st.kind == step_kind::fused)
    return linears && st.first + 1 == k && s.plan.bias_done_by_product[at(st.first)] ? st.first : -1;
  int pre = -1;
  for (int a = 0; a < n.input_count; ++a) {
    const int v = n.inputs[a];
    if (n.kind == op::gelu_grad && a != 1) continue;  // gelu_grad(x, dy): dy is the product
    const bool candidate =
        (linears && s.plan.bias_done_by_product[at(v)]) ||
        ((n.kind == op::add ? adds_after(s.traits, g[v].kind) : linears && g[v].kind == op::linear) &&
         s.computed_alone(v) && s.plan.bias_epilogue_of[at(v)] < 0 && s.only_reader(v, k));
    if (candidate && (pre < 0 || s.step_of(v) > s.step_of(pre))) pre = v;
  }
  return pre;
}

// The epilogue by which `product`'s call writes elementwise node k from `pre` (its value or its
// add_bias's; kind none: k stays a step of its own).
//   gelu       linear [-> add_bias] -> gelu; the pre-activation is written (as side) only when
//              something else reads it: gelu_grad, in training
//   gelu_grad  linear -> gelu_grad(x, dy = the product), x computed before the product
//   add        linear [-> add_bias] -> add(product, v), v computed before the product: the residual
//              add after a projection, or a gradient summed from two branches (q's, k's and v's);
//              also after a norm's input gradient (the residual stream's gradient, summed with the
//              norm branch's) and after embedding_grad (a tied table's gradient: the output layer's
//              weight gradient plus the lookup's, written straight into the parameter's gradient)
inline step_fusion::epilogue elementwise_epilogue(const fusion_state& s, int k, int pre, int product) {
  const graph_view& g = s.nodes();
  const node& n = g[k];
  const auto before = [&](int v) {  // v is computed before the product's step
    return s.step_of(v) != step_index::no_step && s.step_of(v) < s.step_of(product);
  };
  // A parameter's gradient is written in place by its own step (the memory plan), except a tied
  // table's: the sum's value is the gradient buffer, which the lookup's gradient call writes
  // (nothing else reads the buffer before the sum's step).
  for (int r : s.readers(k))
    if (g[r].kind == op::param_grad && g[product].kind != op::embedding_grad) return {};
  if (n.kind == op::gelu)
    return {.kind = compute::product_epilogue::gelu, .out = k, .side = s.only_reader(pre, k) ? -1 : pre};
  if (n.kind == op::gelu_grad) {
    if (pre != product || !before(n.inputs[0])) return {};
    return {.kind = compute::product_epilogue::gelu_grad, .out = k, .side = n.inputs[0]};
  }
  const int other = n.inputs[0] == pre ? n.inputs[1] : n.inputs[0];
  if (other == pre || !s.only_reader(pre, k) || !before(other) || g[other].type != n.type ||
      s.in.layout.of(other).numel() != s.in.layout.of(k).numel())
    return {};
  return {.kind = compute::product_epilogue::add, .out = k, .side = other};
}

// Elementwise steps (gelu, gelu_grad, add) that a product does in its epilogue
// (fused::linear_epilogue; norm_grad_add and embedding_grad_add for the add).
// The product's call writes the step's value, which is live from the product's step on; the
// product's own value, and the add_bias's unless it is the kept pre-activation, is not kept.
inline void plan_product_epilogues(fusion_state& s) {
  const backend_traits& t = s.traits;
  using compute::fused;
  if (!t.fused.has(fused::linear_epilogue) && !t.fused.has(fused::norm_grad_add) &&
      !t.fused.has(fused::embedding_grad_add))
    return;
  const graph_view& g = s.nodes();
  for (const step& st : s.steps()) {
    if (st.kind != step_kind::compute && st.kind != step_kind::fused) continue;
    const int k = st.node;
    const node& n = g[k];
    if (n.kind != op::gelu && n.kind != op::gelu_grad && n.kind != op::add) continue;
    const int pre = product_written_input(s, st);
    if (pre < 0) continue;
    const int product = s.plan.bias_done_by_product[at(pre)] ? g[pre].inputs[0] : pre;
    if (!s.computed_alone(product) || s.plan.epilogue_of[at(product)].out >= 0 ||
        g[product].region != n.region || g[product].type != n.type || g[pre].type != n.type)
      continue;
    const step_fusion::epilogue e = elementwise_epilogue(s, k, pre, product);
    if (e.kind == compute::product_epilogue::none) continue;
    s.plan.epilogue_of[at(product)] = e;
    s.plan.written_by_product[at(k)] = product;
    s.take_over(k, product);
    if (e.side != pre) s.plan.held_in_epilogue[at(pre)] = true;
  }
}

}  // namespace shardgraph::plan::detail
