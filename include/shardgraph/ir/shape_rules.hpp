#pragma once
// Shape and dtype rules of every op, in one place: the builder uses them to give each new node
// its shape, and verify re-checks a finished graph with them. Shapes are global (unsharded) and
// symbolic; local shapes are derived at bind.
#include <initializer_list>

#include "shardgraph/ir/along_dimension_shapes.hpp"
#include "shardgraph/ir/convolution_shapes.hpp"
#include "shardgraph/ir/custom_shape_rule.hpp"
#include "shardgraph/ir/graph.hpp"
#include "shardgraph/ir/shape_text.hpp"

namespace shardgraph {

namespace detail {
constexpr bool expect(graph_ref g, int i, bool condition, std::string_view why_and_how) {
  if (!condition)
    if (diagnostic* d = g.report(i)) *d << why_and_how;
  return condition;
}

// One operand's shape as a message shows it: "weight (ffn, model)".
struct shown_shape {
  std::string_view label;
  const shape& value;
};

// Records "<why>: <label> <shape>, <label> <shape>. <how>" for node i and returns false. Called
// only once a check failed, so that a valid graph builds no message.
constexpr bool mismatch(graph_ref g, int i, std::string_view why, std::initializer_list<shown_shape> shapes,
                        std::string_view how) {
  if (diagnostic* d = g.report(i)) {
    *d << why << ":";
    bool first = true;
    for (const shown_shape& s : shapes) {
      *d << (first ? " " : ", ") << s.label << " " << s.value;
      first = false;
    }
    *d << ". " << how;
  }
  return false;
}
// permute: out's dimension k is x's dimension n.permutation[k]; the permutation must name each of
// x's dimensions once, and no more.
constexpr bool permuted_shape(graph_ref g, int i, const shape& x, shape& out) {
  const node& n = g[i];
  bool seen[max_rank]{};
  bool valid = true;
  for (int k = 0; k < static_cast<int>(max_rank); ++k) {
    const int from = n.permutation[k];
    if (k >= x.rank()) {
      valid = valid && from == -1;
    } else if (from < 0 || from >= x.rank() || seen[from]) {
      valid = false;
    } else {
      seen[from] = true;
      out[k] = x[from];
    }
  }
  if (valid) return true;
  if (diagnostic* d = g.report(i)) {
    *d << "the dimensions {";
    for (int k = 0; k < static_cast<int>(max_rank) && n.permutation[k] != -1; ++k)
      *d << (k > 0 ? ", " : "") << int{n.permutation[k]};
    *d << "} are not a permutation of the " << x.rank() << " dimensions of x: x " << x
       << ". list each dimension of x once, e.g. permute(x, {0, 2, 1}) for three";
  }
  return false;
}

// An attention whose keys are not as long as its queries (cross-attention): only without causal
// (key j <= query i means nothing across two sequences) and without segment ids (a query's segment
// is a position of the keys' sequence).
constexpr bool cross_attention_allowed(graph_ref g, int i) {
  const node& n = g[i];
  const shape &q = g[n.inputs[0]].shape, &k = g[n.inputs[1]].shape;
  if (n.masking.causal)
    return mismatch(g, i, "a causal attention needs queries and keys of one length (cross-attention is not causal)",
                    {{"q", q}, {"k", k}},
                    "pass {.causal = false} for a cross-attention, or split q and k of one seq");
  if (n.masking.mask == attention_mask::segments)
    return mismatch(g, i, "segment ids need queries and keys of one length", {{"q", q}, {"k", k}},
                    "mask a cross-attention's keys with a padding mask (batch, seq_k)");
  return true;
}
}  // namespace detail

// Computes (shape, dtype) of node i from its inputs. Returns false and records a diagnostic
// naming the node when the inputs do not fit the op.
constexpr bool infer_shape(graph_ref g, int i, shape& out, dtype& type) {
  using detail::expect;
  using detail::mismatch;
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
    case op::cached_attention:  // made after verify (passes/attach_kv_cache.hpp): q's shape
      return true;
    case op::embedding:
      if (!expect(g, i, !is_floating(ta), "token ids must be integers. declare the ids input with dtype i64")) return false;
      if (b.rank() != 2)
        return mismatch(g, i, "the table must be (vocab, model)", {{"table", b}},
                        "declare the weight with two dimensions");
      out = a;
      out.dims.push_back(b[1]);
      type = tb;
      return expect(g, i, is_floating(tb), "the table must be floating point. declare it with a float dtype");
    case op::position_embedding:
      if (!same_float(ta, tb)) return false;
      if (!(a.rank() == 3 && b.rank() == 2 && a[2] == b[1]))
        return mismatch(g, i, "expects x (batch, seq, model) and a table (positions, model)",
                        {{"x", a}, {"table", b}}, "check the table's shape");
      return true;
    case op::linear: {
      if (!same_float(ta, tb)) return false;
      if (!(b.rank() == 2 && a.rank() >= 1))
        return mismatch(g, i, "the weight must have two dimensions", {{"input", a}, {"weight", b}},
                        "declare it (in, out), or (out, in) with transpose_b");
      extent k = n.transpose_b ? b[1] : b[0];
      extent m = n.transpose_b ? b[0] : b[1];
      if (!(a.last() == k))
        return mismatch(
            g, i, "the input's last dimension differs from the weight's input dimension",
            {{"input", a}, {"weight", b}},
            "check the weight's shape (linear weights are (in, out); HF Linear weights are (out, in): "
            "use transpose_b)");
      out[a.rank() - 1] = m;
      return true;
    }
    case op::matmul:
      if (!same_float(ta, tb)) return false;
      if (!(a.rank() >= 2 && a.rank() == b.rank()))
        return mismatch(g, i, "expects (..., m, k) @ (..., k, n) of equal rank", {{"a", a}, {"b", b}},
                        "check both shapes");
      if (!(a[a.rank() - 1] == b[b.rank() - 2]))
        return mismatch(g, i, "the inner dimensions differ (a's last, b's second to last)",
                        {{"a", a}, {"b", b}}, "give a (..., m, k) and b (..., k, n) the same k");
      for (int d = 0; d + 2 < a.rank(); ++d)
        if (!(a[d] == b[d]))
          return mismatch(g, i, "batch dimensions differ", {{"a", a}, {"b", b}},
                          "give both operands the same leading dimensions");
      out[a.rank() - 1] = b[b.rank() - 1];
      return true;
    case op::add:
    case op::mul:
      if (!same_float(ta, tb)) return false;
      if (!(a == b))
        return mismatch(g, i, "operands have different shapes", {{"a", a}, {"b", b}},
                        "elementwise ops need equal shapes");
      return true;
    case op::add_bias:
      if (!same_float(ta, tb)) return false;
      if (!(b.rank() == 1 && a.rank() >= 1 && b[0] == a.last()))
        return mismatch(g, i, "the bias must be one-dimensional and match the input's last dimension",
                        {{"input", a}, {"bias", b}}, "check the bias shape");
      return true;
    case op::gelu:
    case op::silu:
    case op::relu:
    case op::gelu_erf:
    case op::quick_gelu:
    case op::softmax:
      return expect(g, i, is_floating(ta), "expects a floating-point input. apply it to activations");
    case op::dropout:
      if (!expect(g, i, is_floating(ta), "expects a floating-point input. apply it to activations")) return false;
      return expect(g, i, n.scalar >= 0.0 && n.scalar < 1.0,
                    n.scalar >= 1.0 ? "the probability p of dropping an element is 1 or more, which drops every "
                                      "element. give p with 0 <= p < 1"
                                    : "the probability p of dropping an element is below 0 (or not a number). "
                                      "give p with 0 <= p < 1");
    case op::layer_norm:
      if (!same_float(ta, tb) || (n.input_count > 2 && !same_float(ta, g[n.inputs[2]].type))) return false;
      if (!(a.rank() >= 1 && b.rank() == 1 && b[0] == a.last() && (n.input_count < 3 || c == b)))
        return mismatch(g, i, "weight and bias must be (features,) with the input's last dimension",
                        {{"input", a}, {"weight", b}, {"bias", c}}, "check their shapes");
      return true;
    case op::rms_norm:
      if (!same_float(ta, tb)) return false;
      if (!(a.rank() >= 1 && b.rank() == 1 && b[0] == a.last()))
        return mismatch(g, i, "the weight must be (features,) with the input's last dimension",
                        {{"input", a}, {"weight", b}}, "check its shape");
      return true;
    case op::rope:
      if (a.rank() != 4)
        return mismatch(g, i, "expects (batch, heads, seq, head_dim)", {{"x", a}}, "apply split_heads first");
      return expect(g, i, is_floating(ta), "expects a floating-point input. apply it to activations");
    case op::split_heads:
      if (!(a.rank() == 3 && a[2].is_product()))
        return mismatch(g, i, "expects (batch, seq, heads * head_dim)", {{"x", a}},
                        "declare the projection's output as dim::heads * dim::head_dim");
      out = shape{a[0], extent{a[2].first}, a[1], extent{a[2].second}};
      return true;
    case op::merge_heads:
      if (a.rank() != 4)
        return mismatch(g, i, "expects (batch, heads, seq, head_dim)", {{"x", a}},
                        "merge the output of attention");
      out = shape{a[0], a[2], a[1] * a[3]};
      return true;
    case op::attention:
      if (!same_float(ta, tb) || !same_float(ta, g[n.inputs[2]].type)) return false;
      if (!(a.rank() == 4 && b.rank() == 4 && c.rank() == 4))
        return mismatch(g, i,
                        "expects q (batch, heads, seq, head_dim) and k, v (batch, kv_heads, seq, head_dim)",
                        {{"q", a}, {"k", b}, {"v", c}}, "split heads first");
      if (!(b == c))
        return mismatch(g, i, "k and v have different shapes (each key/value head needs its value head)",
                        {{"k", b}, {"v", c}}, "project k and v to the same number of heads");
      if (!(a[0] == b[0] && a[3] == b[3]))
        return mismatch(g, i, "q and k differ in batch or head_dim", {{"q", a}, {"k", b}},
                        "split q, k and v into heads of one head_dim");
      if (!(a[2] == b[2]) && !detail::cross_attention_allowed(g, i)) return false;
      if (n.input_count == 4) {  // the mask (batch, seq_k): padding or segment ids (ir/attention_masking.hpp)
        const shape& m = g[n.inputs[3]].shape;
        if (!(m.rank() == 2 && m[0] == a[0] && m[1] == b[2]))
          return mismatch(g, i, "the mask must be (batch, seq) of q and k", {{"mask", m}, {"q", a}, {"k", b}},
                          "pass HF's attention_mask (batch, seq) or segment ids of that shape (a "
                          "cross-attention's: (batch, seq_k) of k)");
        return expect(g, i, g[n.inputs[3]].type == dtype::i64, "the mask must be integers. declare it with dtype i64");
      }
      return true;
    case op::cross_entropy:
      if (!(a.rank() == 3 && b.rank() == 2 && a[0] == b[0] && a[1] == b[1]))
        return mismatch(g, i, "expects logits (batch, seq, vocab) and targets (batch, seq)",
                        {{"logits", a}, {"targets", b}}, "check both shapes");
      if (!expect(g, i, is_floating(ta) && !is_floating(tb), "logits must be float and targets integer. declare targets as i64"))
        return false;
      out = shape{};
      type = ta == dtype::f64 ? dtype::f64 : dtype::f32;  // 16-bit logits: the loss is kept in f32, as autocast does
      return true;
    case op::transpose:  // (..., m, n) -> (..., n, m)
      if (a.rank() < 2)
        return mismatch(g, i, "expects at least two dimensions", {{"x", a}}, "transpose swaps the last two");
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
    case op::relu_grad:
    case op::gelu_erf_grad:
    case op::quick_gelu_grad:
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
    case op::cross_entropy_grad:  // logits, targets, dloss (, lse) -> logits' shape
      out = a;
      return true;
    // The vocabulary-parallel cross-entropy's rows (passes/vocab_parallel_loss.hpp), in f32 (f64
    // for f64 logits), as the loss: logits (batch, seq, vocab), targets (batch, seq) -> statistics
    // (batch, seq, 2); logits, statistics -> sums (batch, seq); statistics, sums -> lse (batch, seq).
    case op::vocab_statistics:
      out = shape{a[0], a[1], dim::fixed<2>};
      type = ta == dtype::f64 ? dtype::f64 : dtype::f32;
      return true;
    case op::vocab_exp_sum:
      out = shape{a[0], a[1]};
      type = tb;
      return true;
    case op::vocab_log_sum_exp:
      out = b;
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
    case op::permute:
      return detail::permuted_shape(g, i, a, out);
    case op::concat:
    case op::slice:
    case op::slice_grad:
    case op::sum:
    case op::mean:
    case op::broadcast:
      return detail::along_dimension_shape(g, i, out);
    case op::patchify:
    case op::unfold1d:
      if (!expect(g, i, is_floating(ta), "expects a floating-point input. convolve activations or pixels"))
        return false;
      if (n.kind == op::patchify) return detail::patchify_shape(g, i, a, out);
      return detail::unfold1d_shape(g, i, a, out);
    case op::unpatchify:
    case op::fold1d:
      return detail::folded_shape(g, i, a, out);
    case op::output:
    case op::repeat_begin:
    case op::redistribute:
    case op::all_reduce:
    case op::all_gather:
    case op::reduce_scatter:
    case op::all_to_all:
    case op::local_slice:
      return true;
    case op::custom:
      return infer_custom_shape(g, i, out, type);
  }
  return true;
}

}  // namespace shardgraph
