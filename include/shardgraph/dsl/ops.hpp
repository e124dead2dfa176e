#pragma once
// The user-facing ops. Each adds one node; shapes are checked by ir/shape_rules.hpp and
// placements are derived later by propagate_sharding. Shapes in comments are global.
#include <initializer_list>

#include "shardgraph/dsl/combining.hpp"
#include "shardgraph/ir/builder.hpp"

namespace shardgraph {

enum class weight_layout { in_out, out_in };  // GPT-2 Conv1D stores (in, out); torch Linear (out, in)

namespace detail {
constexpr tensor apply_op(op kind, std::initializer_list<tensor> inputs, std::string_view name = {},
                          double scalar = 0.0, bool transpose_b = false, attention_masking masking = {}) {
  node n;
  n.kind = kind;
  n.scalar = scalar;
  n.transpose_b = transpose_b;
  n.masking = masking;  // attention: its shape rule reads it
  graph_builder* b = inputs.begin()->builder;
  for (tensor t : inputs) n.inputs[n.input_count++] = t.id;
  n.type = b->value()[inputs.begin()->id].type;
  return b->make(n, name);
}
// "h.mlp.c_fc.weight" -> "h.mlp.c_fc": ops that own a weight are named after it.
constexpr std::string_view owner_name(tensor weight) {
  std::string_view w = weight.builder->value()[weight.id].name.view();
  if (w.ends_with(".weight")) w.remove_suffix(7);
  return w;
}
}  // namespace detail

// ids (batch, seq) integer, table (vocab, model) -> (batch, seq, model)
constexpr tensor embedding(tensor ids, tensor table) {
  return detail::apply_op(op::embedding, {ids, table}, detail::owner_name(table));
}
// x (batch, seq, model) + table[0:seq] (positions, model)
constexpr tensor position_embedding(tensor x, tensor table) {
  return detail::apply_op(op::position_embedding, {x, table}, detail::owner_name(table));
}
// x (..., in) @ w (in, out) -> (..., out); with weight_layout::out_in, w is (out, in)
constexpr tensor linear(tensor x, tensor w, weight_layout layout = weight_layout::in_out) {
  return detail::apply_op(op::linear, {x, w}, detail::owner_name(w), 0.0, layout == weight_layout::out_in);
}
// x (..., n) + b (n)
constexpr tensor add_bias(tensor x, tensor b) { return detail::apply_op(op::add_bias, {x, b}); }
constexpr tensor linear(tensor x, tensor w, tensor b, weight_layout layout = weight_layout::in_out) {
  return add_bias(linear(x, w, layout), b);
}
// a (..., m, k) @ b (..., k, n) -> (..., m, n)
constexpr tensor matmul(tensor a, tensor b) { return detail::apply_op(op::matmul, {a, b}); }
constexpr tensor add(tensor a, tensor b) { return detail::apply_op(op::add, {a, b}); }
constexpr tensor mul(tensor a, tensor b) { return detail::apply_op(op::mul, {a, b}); }
constexpr tensor operator+(tensor a, tensor b) { return add(a, b); }
constexpr tensor operator*(tensor a, tensor b) { return mul(a, b); }
// tanh approximation, as GPT-2 ("gelu_new")
constexpr tensor gelu(tensor x) { return detail::apply_op(op::gelu, {x}); }
constexpr tensor silu(tensor x) { return detail::apply_op(op::silu, {x}); }
// max(x, 0); its gradient at 0 is 0, as torch's
constexpr tensor relu(tensor x) { return detail::apply_op(op::relu, {x}); }
// GELU's two forms: tanh, GPT-2's "gelu_new" (torch approximate='tanh'); erf, the exact
// 0.5 x (1 + erf(x / sqrt 2)) of ViT, CLIP and BERT (torch approximate='none', HF "gelu").
enum class gelu_approximation { tanh, erf };
constexpr tensor gelu_erf(tensor x) { return detail::apply_op(op::gelu_erf, {x}); }
constexpr tensor gelu(tensor x, gelu_approximation form) {
  return form == gelu_approximation::erf ? gelu_erf(x) : gelu(x);
}
// x sigmoid(1.702 x): HF's "quick_gelu", the activation of CLIP's vision tower
constexpr tensor quick_gelu(tensor x) { return detail::apply_op(op::quick_gelu, {x}); }
// torch's dropout in training: each element of x is zeroed with probability p, 0 <= p < 1, and the
// others scaled by 1 / (1 - p). The mask is a function of (seed, the training step, the layer, the
// element's index in the whole tensor): the same on every layout (compute/dropout_mask.hpp). It
// acts only in a training step (trainer::step); forward() outside one, and inference, pass x
// through. Give each dropout of a model its own seed.
constexpr tensor dropout(tensor x, double p, std::uint64_t seed) {
  tensor y = detail::apply_op(op::dropout, {x}, {}, p);
  y.builder->value()[y.id].seed = seed;
  return y;
}
// x (d0, ..., d[r-1]) -> (d[from[0]], ..., d[from[r-1]]), r <= 4: the result's dimension k is x's
// dimension from[k] (`permute(x, {0, 2, 1, 3})`); from must list each of x's dimensions once.
// Placements: a sharded dimension moves with the permutation; Replicate and Partial pass through.
// Its gradient is the inverse permutation.
constexpr tensor permute(tensor x, std::initializer_list<int> from) {
  node n;
  n.kind = op::permute;
  n.inputs[n.input_count++] = x.id;
  n.type = x.builder->value()[x.id].type;
  int k = 0;
  for (int d : from) {
    if (k == static_cast<int>(max_rank)) {  // more dimensions than any tensor has: not a permutation
      n.permutation[0] = static_cast<std::int8_t>(max_rank);
      break;
    }
    n.permutation[k++] = static_cast<std::int8_t>(d < -1 || d > 127 ? max_rank : d);
  }
  return x.builder->make(n);
}
// x with its dimensions first and second swapped (negative: counted from the last, -1 the last).
constexpr tensor transpose(tensor x, int first, int second) {
  const int rank = x.builder->value()[x.id].shape.rank();
  if (first < 0) first += rank;
  if (second < 0) second += rank;
  int from[max_rank]{0, 1, 2, 3};
  if (first >= 0 && first < rank && second >= 0 && second < rank) {
    from[first] = second;
    from[second] = first;
  } else {
    from[0] = static_cast<int>(max_rank);  // names a dimension x does not have
  }
  switch (rank) {
    case 1: return permute(x, {from[0]});
    case 2: return permute(x, {from[0], from[1]});
    case 3: return permute(x, {from[0], from[1], from[2]});
    default: return permute(x, {from[0], from[1], from[2], from[3]});
  }
}
// over the last dimension
constexpr tensor softmax(tensor x) { return detail::apply_op(op::softmax, {x}); }
// over the last dimension: x (..., c), w (c), b (c)
constexpr tensor layer_norm(tensor x, tensor w, tensor b, double eps = 1e-5) {
  return detail::apply_op(op::layer_norm, {x, w, b}, detail::owner_name(w), eps);
}
constexpr tensor rms_norm(tensor x, tensor w, double eps = 1e-6) {
  return detail::apply_op(op::rms_norm, {x, w}, detail::owner_name(w), eps);
}
// rotary position embedding (rotate-half convention) on x (batch, heads, seq, head_dim), with
// HF's scaling kinds (ir/rope_scaling.hpp)
constexpr tensor rope(tensor x, const rope_scaling& scaling) {
  tensor r = detail::apply_op(op::rope, {x});
  r.builder->value()[r.id].rope = scaling;
  return r;
}
constexpr tensor rope(tensor x, double theta = 10000.0) { return rope(x, rope_scaling{.theta = theta}); }
// (batch, seq, heads * head_dim) -> (batch, heads, seq, head_dim)
constexpr tensor split_heads(tensor x) { return detail::apply_op(op::split_heads, {x}); }
// (batch, heads, seq, head_dim) -> (batch, seq, heads * head_dim)
constexpr tensor merge_heads(tensor x) { return detail::apply_op(op::merge_heads, {x}); }
// causal softmax(q k^T * scale) v; q (batch, heads, seq, head_dim), k and v
// (batch, kv_heads, seq, head_dim) with heads a multiple of kv_heads (grouped-query attention).
// Non-causal (attention_options), k and v may have their own length seq_k: cross-attention.
// scale 0 (the default) stands for 1 / sqrt(head_dim); GPT-2's scale_attn_weights false is 1.
constexpr tensor attention(tensor q, tensor k, tensor v, double scale = 0.0) {
  return detail::apply_op(op::attention, {q, k, v}, {}, scale);
}
// attention with options: causal false for a bidirectional encoder (ViT, BERT) or a
// cross-attention, whose k and v (batch, kv_heads, seq_k, head_dim) have a length of their own (a
// decoder's queries over an encoder's states); causal needs seq_k == seq. `mask_kind` says what a
// mask, when one is given, holds.
struct attention_options {
  bool causal = true;
  double scale = 0.0;  // 0: 1 / sqrt(head_dim)
  attention_mask mask_kind = attention_mask::padding;
};
constexpr tensor attention(tensor q, tensor k, tensor v, attention_options o) {
  return detail::apply_op(op::attention, {q, k, v}, {}, o.scale, false,
                          {.causal = o.causal, .mask = attention_mask::none});
}
// Masked attention; mask (batch, seq_k) i64 (ir/attention_masking.hpp):
//   mask_kind padding    HF's attention_mask: 1 attend, 0 a padded key that no query sees
//                        (a cross-attention's key padding mask: the encoder's attention_mask)
//   mask_kind segments   segment ids: a query sees only the keys of its own segment (packed
//                        sequences), and with causal only the earlier ones of them
// A query that sees no key gives 0 (and no gradient). The mask follows q's batch placement.
constexpr tensor attention(tensor q, tensor k, tensor v, tensor mask, attention_options o = {}) {
  return detail::apply_op(op::attention, {q, k, v, mask}, {}, o.scale, false,
                          {.causal = o.causal, .mask = o.mask_kind});
}
// torch's F.cross_entropy(logits, targets, ignore_index=, reduction=) over every (batch, seq) position:
// logits (batch, seq, vocab), targets (batch, seq) -> scalar. A position whose target is
// ignore_index adds nothing and is not counted; `mean` divides the sum of -log softmax(logits)[target]
// by the number of targets counted in the whole step (every data-parallel rank and micro-batch),
// `sum` does not divide. Only the vocabulary's first `classes` columns are classes (model_sizes::
// classes; the rest is padding, left out of the softmax and given no gradient).
struct cross_entropy_options {
  std::int64_t ignore_index = -100;
  loss_reduction reduction = loss_reduction::mean;
};
constexpr tensor cross_entropy(tensor logits, tensor targets, cross_entropy_options o = {}) {
  tensor loss = detail::apply_op(op::cross_entropy, {logits, targets});
  node& n = loss.builder->value()[loss.id];
  n.ignore_index = o.ignore_index;
  n.reduction = o.reduction;
  return loss;
}

// Gives a node a name of the user's choosing (shown in printed programs and errors).
constexpr tensor rename(tensor x, std::string_view name) {
  x.builder->value()[x.id].name.assign(name);
  return x;
}

// Marks a value the program returns; its placement becomes Replicate on every axis.
constexpr tensor output(tensor x, std::string_view name) { return detail::apply_op(op::output, {x}, name); }

// Asks for a placement explicitly on the mesh axes it names, `redistribute(x, on<"tp">(shard<2>))`;
// on every axis it does not name the value keeps the placement it has (x Shard<0> on dp above stays
// Shard<0> on dp). Name an axis with `replicate` to gather the value whole on it.
template <class... Annotations>
constexpr tensor redistribute(tensor x, const Annotations&... annotations) {
  tensor r = detail::apply_op(op::redistribute, {x});
  graph_ref g = x.builder->value();
  g[r.id].annotated = true;
  (
      [&] {
        int axis = g.axes.index_of(annotations.axis.view());
        if (axis < 0) {
          if (diagnostic* d = g.report(r.id))
            *d << "axis '" << annotations.axis.view() << "' is not in the mesh. use one of the mesh's axes";
          return;
        }
        placement p = annotations.where;
        if (p.is_shard() && p.dim < 0) p.dim = static_cast<std::int8_t>(p.dim + g[r.id].shape.rank());
        g[r.id].spec[axis] = p;
        g[r.id].named_axes = static_cast<std::uint8_t>(g[r.id].named_axes | (1u << axis));
      }(),
      ...);
  return r;
}

}  // namespace shardgraph
