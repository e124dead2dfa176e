#pragma once
// Shape and dtype rules of every op, in one place: the builder uses them to give each new node
// its shape, and verify re-checks a finished graph with them. Shapes are global (unsharded) and
// symbolic; local shapes are derived at bind.
#include "shardgraph/ir/graph.hpp"

namespace shardgraph {

namespace detail {
constexpr bool expect(graph& g, int i, bool condition, std::string_view why_and_how) {
  if (!condition)
    if (diagnostic* d = g.report(i)) *d << why_and_how;
  return condition;
}
}  // namespace detail

// Computes (shape, dtype) of node i from its inputs. Returns false and records a diagnostic
// naming the node when the inputs do not fit the op.
constexpr bool infer_shape(graph& g, int i, shape& out, dtype& type) {
  using detail::expect;
  node& n = g[i];
  const shape none{};
  const shape& a = n.input_count > 0 ? g[n.inputs[0]].shape : none;
  const shape& b = n.input_count > 1 ? g[n.inputs[1]].shape : none;
  const shape& c = n.input_count > 2 ? g[n.inputs[2]].shape : none;
  const dtype ta = n.input_count > 0 ? g[n.inputs[0]].type : n.type;
  const dtype tb = n.input_count > 1 ? g[n.inputs[1]].type : ta;
  out = a;
  type = ta;
  auto same_float = [&](dtype x, dtype y) {
    return expect(g, i, is_floating(x) && x == y,
                  "inputs must share one floating-point dtype. build the model with one dtype");
  };
  switch (n.kind) {
    case op::input:
    case op::parameter:
      out = n.shape;
      type = n.type;
      return true;
    case op::embedding:
      if (!expect(g, i, !is_floating(ta), "token ids must be integers. declare the ids input with dtype i64")) return false;
      if (!expect(g, i, b.rank() == 2, "the table must be (vocab, model). declare the weight with two dimensions")) return false;
      out = a;
      out.dims.push_back(b[1]);
      type = tb;
      return expect(g, i, is_floating(tb), "the table must be floating point. declare it with a float dtype");
    case op::position_embedding:
      if (!same_float(ta, tb)) return false;
      return expect(g, i, a.rank() == 3 && b.rank() == 2 && a[2] == b[1],
                    "expects x (batch, seq, model) and a table (positions, model). check the table's shape");
    case op::linear: {
      if (!same_float(ta, tb)) return false;
      if (!expect(g, i, b.rank() == 2 && a.rank() >= 1,
                  "the weight must have two dimensions. declare it (in, out), or (out, in) with transpose_b"))
        return false;
      extent k = n.transpose_b ? b[1] : b[0];
      extent m = n.transpose_b ? b[0] : b[1];
      if (!expect(g, i, a.last() == k,
                  "the input's last dimension differs from the weight's input dimension. check the weight's shape "
                  "(linear weights are (in, out); HF Linear weights are (out, in): use transpose_b)"))
        return false;
      out[a.rank() - 1] = m;
      return true;
    }
    case op::matmul:
      if (!same_float(ta, tb)) return false;
      if (!expect(g, i, a.rank() >= 2 && a.rank() == b.rank() && a[a.rank() - 1] == b[b.rank() - 2],
                  "expects (..., m, k) @ (..., k, n) of equal rank. check both shapes"))
        return false;
      for (int d = 0; d + 2 < a.rank(); ++d)
        if (!expect(g, i, a[d] == b[d], "batch dimensions differ. give both operands the same leading dimensions"))
          return false;
      out[a.rank() - 1] = b[b.rank() - 1];
      return true;
    case op::add:
    case op::mul:
      if (!same_float(ta, tb)) return false;
      return expect(g, i, a == b, "operands have different shapes. elementwise ops need equal shapes");
    case op::add_bias:
      if (!same_float(ta, tb)) return false;
      return expect(g, i, b.rank() == 1 && a.rank() >= 1 && b[0] == a.last(),
                    "the bias must be one-dimensional and match the input's last dimension. check the bias shape");
    case op::gelu:
    case op::silu:
    case op::softmax:
      return expect(g, i, is_floating(ta), "expects a floating-point input. apply it to activations");
    case op::layer_norm:
      if (!same_float(ta, tb) || (n.input_count > 2 && !same_float(ta, g[n.inputs[2]].type))) return false;
      return expect(g, i, b.rank() == 1 && b[0] == a.last() && (n.input_count < 3 || c == b),
                    "weight and bias must be (features,) with the input's last dimension. check their shapes");
    case op::rms_norm:
      if (!same_float(ta, tb)) return false;
      return expect(g, i, b.rank() == 1 && b[0] == a.last(),
                    "the weight must be (features,) with the input's last dimension. check its shape");
    case op::rope:
      return expect(g, i, a.rank() == 4 && is_floating(ta),
                    "expects (batch, heads, seq, head_dim). apply split_heads first");
    case op::split_heads:
      if (!expect(g, i, a.rank() == 3 && a[2].is_product(),
                  "expects (batch, seq, heads * head_dim). declare the projection's output as dim::heads * dim::head_dim"))
        return false;
      out = shape{a[0], extent{a[2].first}, a[1], extent{a[2].second}};
      return true;
    case op::merge_heads:
      if (!expect(g, i, a.rank() == 4, "expects (batch, heads, seq, head_dim). merge the output of attention")) return false;
      out = shape{a[0], a[2], a[1] * a[3]};
      return true;
    case op::attention:
      if (!same_float(ta, tb) || !same_float(ta, g[n.inputs[2]].type)) return false;
      return expect(g, i,
                    a.rank() == 4 && b.rank() == 4 && b == c && a[0] == b[0] && a[2] == b[2] && a[3] == b[3],
                    "expects q (batch, heads, seq, head_dim) and k, v (batch, kv_heads, seq, head_dim). split heads first");
    case op::cross_entropy:
      if (!expect(g, i, a.rank() == 3 && b.rank() == 2 && a[0] == b[0] && a[1] == b[1],
                  "expects logits (batch, seq, vocab) and targets (batch, seq). check both shapes"))
        return false;
      if (!expect(g, i, is_floating(ta) && !is_floating(tb), "logits must be float and targets integer. declare targets as i64"))
        return false;
      out = shape{};
      type = ta == dtype::f64 ? dtype::f64 : dtype::f32;  // 16-bit logits: the loss is kept in f32, as autocast does
      return true;
    case op::transpose:  // (..., m, n) -> (..., n, m)
      if (!expect(g, i, a.rank() >= 2, "expects at least two dimensions. transpose swaps the last two")) return false;
      out[a.rank() - 1] = a[a.rank() - 2];
      out[a.rank() - 2] = a.last();
      return true;
    case op::linear_weight_grad: {  // x (..., k), dy (..., n) -> (k, n), or (n, k) for an (out, in) weight
      if (!same_float(ta, tb)) return false;
      if (!expect(g, i, a.rank() == b.rank() && a.rank() >= 1, "x and dy must have the same rank. this is a bug in autodiff"))
        return false;
      out = n.transpose_b ? shape{b.last(), a.last()} : shape{a.last(), b.last()};
      return true;
    }
    case op::bias_grad:  // dy (..., n) -> (n)
      out = shape{a.last()};
      return true;
    case op::gelu_grad:
    case op::silu_grad:
    case op::softmax_grad:
      if (!same_float(ta, tb)) return false;
      return expect(g, i, a == b, "value and gradient shapes differ. this is a bug in autodiff");
    case op::layer_norm_grad_x:
    case op::rms_norm_grad_x:
    case op::attention_grad_q:
      out = a;
      return true;
    case op::attention_grad_k:
      out = b;
      return true;
    case op::attention_grad_v:
      out = c;
      return true;
    case op::layer_norm_grad_w:
    case op::rms_norm_grad_w:
      out = shape{a.last()};
      return true;
    case op::rope_grad:
      return true;
    case op::embedding_grad:  // ids, dy, table -> table's shape
      out = c;
      type = tb;
      return true;
    case op::position_embedding_grad:  // dy, table -> table's shape
      out = b;
      return true;
    case op::cross_entropy_grad:  // logits, targets, dloss -> logits' shape
      out = a;
      return true;
    case op::ones:
      out = n.shape;
      type = n.type;
      return true;
    case op::param_grad:
      return expect(g, i, a == g[n.origin].shape, "the gradient's shape differs from its parameter's. this is a bug in autodiff");
    case op::repeat_end:
      return expect(g, i, a == g[n.region].shape && ta == g[n.region].type,
                    "the repeated body changes the shape or dtype of its input. a repeated block must map x to x's shape");
    case op::output:
    case op::repeat_begin:
    case op::redistribute:
    case op::all_reduce:
    case op::all_gather:
    case op::reduce_scatter:
    case op::all_to_all:
    case op::local_slice:
      return true;
  }
  return true;
}

}  // namespace shardgraph
