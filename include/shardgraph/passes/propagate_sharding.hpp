#pragma once
// propagate_sharding: derives every node's placement from the user's annotations on inputs and
// parameters, one mesh axis at a time, by each op's placement signatures (as OneFlow's SBP and
// PyTorch's DTensor do). For every input it also records the placement the op needs; where that
// differs from what the producer has, insert_collectives adds the collective.
//
// Signatures, per axis (R Replicate, S(d) Shard<d>, P Partial; x (..., k) and w (k, n)):
//   linear      x R    w R     -> R        x S(d<last) w R -> S(d)     x P w R -> P
//               x R    w S(n)  -> S(last)  (column parallel)
//               x S(last) w S(k) -> P      (row parallel; x R is sliced first, x P reduce-scattered)
//   embedding   ids R, table S(0) -> P (vocab parallel); table S(1) -> S(2); table R -> ids' placement
//   norms, softmax, rope    the normalized / rotated dimensions must be whole: S there or P -> R first
//   attention   batch or heads sharded pass through; seq or head_dim sharded -> R first; a mask
//               (batch, seq) S(0) with q's batch, R otherwise
//   elementwise equal placements pass (P*P needs one side reduced); R meets S(d) -> R is sliced
//   cross_entropy  batch or seq sharded -> P (a partial sum of the mean); vocab sharded: vocabulary
//               parallel (its rows' statistics are reduced instead of the logits gathered; below)
//   output      R on every axis
//   permute     S(from[k]) -> S(k); R and P pass through
//   concat, slice, sum, mean and their gradients   passes/along_dimension_sharding.hpp
//   patchify, unfold1d and their gradients    passes/convolution_sharding.hpp
//   redistribute   the placement it names on an axis; on an axis it does not name, the input's
//   custom      the op's sharding rule (passes/custom_sharding.hpp)
#include "shardgraph/ir/graph.hpp"
#include "shardgraph/passes/along_dimension_sharding.hpp"
#include "shardgraph/passes/axis_decision.hpp"
#include "shardgraph/passes/convolution_sharding.hpp"
#include "shardgraph/passes/custom_sharding.hpp"

namespace shardgraph::passes {

namespace detail {

constexpr placement whole_last(placement p, int last) {
  return (p.is_partial() || p.is_shard(last)) ? replicate : p;
}

// The placement of a loss's rows (batch, seq) on one axis: the logits' where they shard a row
// dimension, else the other operand's where it does, else Replicate.
constexpr placement rows_of(placement logits, placement other) {
  if (logits.is_shard(0) || logits.is_shard(1)) return logits;
  if (other.is_shard(0) || other.is_shard(1)) return other;
  return replicate;
}

// The vocabulary-parallel cross-entropy (passes/vocab_parallel_loss.hpp). On its vocabulary axis
// the logits stay sharded: vocab_statistics and vocab_exp_sum give Partial sums of their rows,
// and everything else reads whole rows (Replicate). On the other axes the rows' placement passes.
constexpr axis_decision decide_vocab_parallel(const graph_view& g, const node& n, int axis) {
  axis_decision r;
  placement in[max_inputs]{};
  for (int k = 0; k < n.input_count; ++k) in[k] = g[n.inputs[k]].spec[axis];
  const bool logits_first = n.kind != op::vocab_log_sum_exp;
  if (axis == n.vocab_axis) {
    for (int k = 0; k < n.input_count; ++k) r.need[k] = replicate;
    if (logits_first) r.need[0] = in[0];
    const bool partial_sums = n.kind == op::vocab_statistics || n.kind == op::vocab_exp_sum;
    r.out = partial_sums ? partial : n.kind == op::cross_entropy_grad ? in[0] : replicate;
    return r;
  }
  const placement rows = rows_of(in[0].is_partial() ? replicate : in[0], in[1]);
  for (int k = 0; k < n.input_count; ++k) r.need[k] = rows;
  if (n.kind == op::cross_entropy_grad) r.need[2] = replicate;  // d loss, a scalar
  r.out = n.kind == op::cross_entropy ? (rows.is_shard() ? partial : replicate) : rows;
  return r;
}

// An attention's mask (batch, seq) follows q's batch sharding; where q is sharded over heads (or
// whole) every rank needs the whole mask.
constexpr placement attention_mask_placement(placement q) { return q.is_shard(0) ? q : replicate; }

constexpr axis_decision decide(const graph_view& g, const node& n, int axis) {
  if (n.vocab_axis >= 0) return decide_vocab_parallel(g, n, axis);
  axis_decision r;
  placement in[max_inputs]{};
  for (int k = 0; k < n.input_count; ++k) in[k] = g[n.inputs[k]].spec[axis];
  for (int k = 0; k < n.input_count; ++k) r.need[k] = in[k];
  r.out = in[0];
  const int rank = n.input_count > 0 ? g[n.inputs[0]].shape.rank() : 0;
  const int last = rank - 1;
  switch (n.kind) {
    case op::input:
    case op::parameter:
      r.out = n.spec[axis];
      break;
    case op::cached_attention:  // made after this pass, with its placements (passes/attach_kv_cache.hpp)
      break;
    case op::gelu:
    case op::silu:
    case op::relu:
    case op::gelu_erf:
    case op::quick_gelu:
      if (in[0].is_partial()) r.out = r.need[0] = replicate;
      break;
    case op::softmax:
    case op::layer_norm:
    case op::rms_norm:
      r.out = r.need[0] = whole_last(in[0], last);
      for (int k = 1; k < n.input_count; ++k) r.need[k] = replicate;
      break;
    case op::rope:
      r.out = r.need[0] = (in[0].is_partial() || in[0].is_shard(2) || in[0].is_shard(3)) ? replicate : in[0];
      break;
    case op::add:
    case op::mul: {
      placement a = in[0], b = in[1];
      bool is_mul = n.kind == op::mul;
      if (a == b) {
        if (is_mul && a.is_partial()) r.need[1] = replicate;
        r.out = a;
      } else if (a.is_partial() && b.is_replicate()) {
        if (is_mul) r.out = partial;
        else r.out = r.need[0] = replicate;
      } else if (a.is_replicate() && b.is_partial()) {
        if (is_mul) r.out = partial;
        else r.out = r.need[1] = replicate;
      } else if (a.is_shard()) {
        r.out = r.need[1] = a;  // b: slice (R), reduce-scatter (P) or all-to-all (S(e))
      } else {
        r.out = r.need[0] = b;
      }
      break;
    }
    case op::add_bias: {
      placement x = in[0], b = in[1];
      if (x.is_shard(last)) {
        r.need[1] = shard_on(0);
      } else if (x.is_partial()) {
        r.out = r.need[0] = b.is_shard(0) ? shard_on(last) : replicate;
      } else if (b.is_shard(0)) {
        if (x.is_replicate()) r.out = r.need[0] = shard_on(last);
        else r.need[1] = replicate;
      }
      break;
    }
    case op::linear: {
      placement x = in[0], w = in[1];
      const int wk = n.transpose_b ? 1 : 0;
      const int wn = 1 - wk;
      if (w.is_replicate()) {
        if (x.is_shard(last)) r.out = r.need[0] = replicate;
      } else if (x.is_shard() && x.dim != last) {
        r.conflict =
            "the weight is sharded on a mesh axis that also shards the activations' batch or sequence "
            "dimension. annotate the weight Replicate on this axis (parameter sharding over data-parallel "
            "ranks comes from the ZeRO setting, not from annotations)";
      } else if (w.is_shard(wn)) {
        if (x.is_shard(last)) {
          r.conflict =
              "conflicting shardings of the contraction dimension: the input is sharded along it but the "
              "weight along its output dimension. shard the weight along its input dimension (row parallel), "
              "or redistribute the input to Replicate";
        } else {
          r.need[0] = replicate;
          r.out = shard_on(last);
        }
      } else if (w.is_shard(wk)) {
        r.need[0] = shard_on(last);
        r.out = partial;
      }
      break;
    }
    case op::matmul: {
      placement a = in[0], b = in[1];
      const int m = rank - 2, k = rank - 1;
      if (a.is_shard() && a.dim < m && (b == a || b.is_replicate())) {
        r.out = r.need[1] = a;
      } else if (b.is_shard() && b.dim < m && a.is_replicate()) {
        r.out = r.need[0] = b;
      } else if (a.is_shard(m) && b.is_replicate()) {
        r.out = a;
      } else if (a.is_replicate() && b.is_shard(k)) {
        r.out = shard_on(k);
      } else if (a.is_shard(k) && b.is_shard(m)) {
        r.out = partial;
      } else if ((a.is_partial() && b.is_replicate()) || (a.is_replicate() && b.is_partial())) {
        r.out = partial;
      } else {
        r.out = r.need[0] = r.need[1] = replicate;
      }
      break;
    }
    case op::embedding: {
      placement ids = in[0], w = in[1];
      if (w.is_replicate()) {
        r.out = ids;
      } else if (!ids.is_replicate()) {
        r.conflict =
            "the table is sharded on a mesh axis that also shards the token ids. annotate the table "
            "Replicate on this axis";
      } else {
        r.out = w.is_shard(0) ? partial : shard_on(2);
      }
      break;
    }
    case op::position_embedding: {
      placement x = (in[0].is_partial() || in[0].is_shard(1)) ? replicate : in[0];
      placement w = in[1].is_shard(0) ? replicate : in[1];
      if (x.is_shard(2)) {
        w = shard_on(1);
      } else if (w.is_shard(1)) {
        if (x.is_replicate()) x = shard_on(2);
        else w = replicate;
      }
      r.need[0] = x;
      r.need[1] = w;
      r.out = x;
      break;
    }
    case op::split_heads:  // (b, t, h*d) -> (b, h, t, d)
      if (in[0].is_shard(1)) r.out = shard_on(2);
      else if (in[0].is_shard(2)) r.out = shard_on(1);
      break;
    case op::merge_heads:  // (b, h, t, d) -> (b, t, h*d)
      if (in[0].is_shard(3)) r.out = r.need[0] = replicate;
      else if (in[0].is_shard(1)) r.out = shard_on(2);
      else if (in[0].is_shard(2)) r.out = shard_on(1);
      break;
    case op::attention: {
      auto passes = [](placement p) { return p.is_shard(0) || p.is_shard(1); };
      placement t = passes(in[0]) ? in[0] : (in[0].is_replicate() && passes(in[1])) ? in[1] : replicate;
      r.need[0] = r.need[1] = r.need[2] = r.out = t;
      if (n.input_count == 4) r.need[3] = attention_mask_placement(t);
      break;
    }
    case op::cross_entropy: {
      placement logits = whole_last(in[0], 2);
      placement targets = in[1];
      if (logits.is_shard()) {
        r.need[0] = logits;
        r.need[1] = logits;
        r.out = partial;
      } else if (targets.is_shard()) {
        r.need[0] = targets;
        r.out = partial;
      } else {
        r.need[0] = replicate;
        r.out = replicate;
      }
      break;
    }
    case op::output:
      r.out = r.need[0] = replicate;
      break;
    case op::repeat_begin:
      break;
    case op::repeat_end:
      r.out = r.need[0] = g[n.region].spec[axis];
      break;
    case op::redistribute:  // the axes it names; the others keep the input's placement
      r.out = r.need[0] = (n.named_axes >> axis) & 1u ? n.spec[axis] : in[0];
      break;
    case op::all_reduce:
    case op::all_gather:
    case op::reduce_scatter:
    case op::all_to_all:
    case op::local_slice:
      if (axis == n.axis) r.out = n.spec[axis];
      break;
    case op::dropout:  // linear in x for a mask drawn by global index: R, S(d) and P pass through
      break;
    case op::permute:  // a sharded dimension moves with the permutation; R and P pass through
      for (int k = 0; k < rank && in[0].is_shard(); ++k)
        if (n.permutation[k] == in[0].dim) r.out = shard_on(k);
      break;
    case op::patchify:
    case op::unpatchify:
    case op::unfold1d:
    case op::fold1d:
      r = decide_convolution_layout(n, in[0]);
      break;

    // gradients: each is linear in the incoming gradient, and reads forward values whole where
    // the forward op did
    case op::transpose:
      if (in[0].is_shard(last)) r.out = shard_on(last - 1);
      else if (in[0].is_shard(last - 1)) r.out = shard_on(last);
      break;
    case op::linear_weight_grad: {  // x (..., k), dy (..., n) -> (k, n) or (n, k)
      placement x = in[0], dy = in[1];
      const int kdim = n.transpose_b ? 1 : 0, ndim = 1 - kdim;
      if (x.is_partial() || dy.is_partial()) {  // linear in each: keep one side partial, the other whole
        if (x.is_partial()) r.need[1] = replicate;
        else r.need[0] = replicate;
        r.out = partial;
      } else if (x.is_replicate() && dy.is_replicate()) {
        r.out = replicate;
      } else if (x.is_replicate() && dy.is_shard(last)) {
        r.out = shard_on(ndim);
      } else if (x.is_shard(last) && dy.is_replicate()) {
        r.out = shard_on(kdim);
      } else if (x.is_shard(last) && dy.is_shard(last)) {
        r.need[0] = replicate;
        r.out = shard_on(ndim);
      } else if (x.is_shard()) {  // batch or sequence sharded: a partial sum over the local rows
        r.need[1] = x;
        r.out = partial;
      } else {
        r.need[0] = dy;
        r.out = partial;
      }
      break;
    }
    case op::bias_grad:
      r.out = in[0].is_shard(last) ? shard_on(0) : in[0].is_shard() ? partial : in[0];
      break;
    case op::gelu_grad:
    case op::silu_grad:
    case op::relu_grad:
    case op::gelu_erf_grad:
    case op::quick_gelu_grad: {  // (x, dy): nonlinear in x, linear in dy
      placement x = in[0].is_partial() ? replicate : in[0];
      placement dy = in[1];
      if (x == dy || (x.is_replicate() && dy.is_partial())) {
        r.out = dy;
      } else if (x.is_shard()) {
        dy = x;
        r.out = x;
      } else {
        x = dy;
        r.out = dy;
      }
      r.need[0] = x;
      r.need[1] = dy;
      break;
    }
    case op::layer_norm_grad_x:
    case op::rms_norm_grad_x: {  // (x, w, dy)
      placement x = whole_last(in[0], last);
      r.need[0] = x;
      r.need[1] = replicate;
      r.need[2] = x;
      r.out = x;
      break;
    }
    case op::layer_norm_grad_w:
    case op::rms_norm_grad_w: {  // (x, dy) -> (features)
      placement x = whole_last(in[0], last);
      r.need[0] = r.need[1] = x;
      r.out = x.is_shard() ? partial : replicate;
      break;
    }
    case op::rope_grad:
      r.out = r.need[0] = (in[0].is_partial() || in[0].is_shard(2) || in[0].is_shard(3)) ? replicate : in[0];
      break;
    case op::attention_grad_q:
    case op::attention_grad_k:
    case op::attention_grad_v: {
      auto passes = [](placement p) { return p.is_shard(0) || p.is_shard(1); };
      placement t = passes(in[0]) ? in[0] : (in[0].is_replicate() && passes(in[1])) ? in[1] : replicate;
      r.need[0] = r.need[1] = r.need[2] = r.need[3] = r.out = t;
      if (n.input_count == 5) r.need[4] = attention_mask_placement(t);
      break;
    }
    case op::softmax_grad: {  // (y, dy)
      placement y = whole_last(in[0], last);
      r.need[0] = r.need[1] = r.out = y;
      break;
    }
    case op::embedding_grad: {  // (ids, dy, table) -> table's shape; the table is read for its shape only
      placement ids = in[0], dy = in[1], table = in[2];
      if (table.is_shard(0)) {
        r.need[0] = r.need[1] = replicate;
        r.out = table;
      } else if (table.is_shard(1)) {
        r.need[0] = replicate;
        r.need[1] = shard_on(2);
        r.out = table;
      } else if (ids.is_shard()) {
        r.need[1] = ids;
        r.out = partial;
      } else if (dy.is_shard(0) || dy.is_shard(1)) {
        r.need[0] = dy;
        r.out = partial;
      } else if (dy.is_shard(2)) {
        r.out = shard_on(1);
      } else {
        r.out = dy;  // Replicate, or Partial: the gradient is linear in dy
      }
      break;
    }
    case op::position_embedding_grad: {  // (dy, table) -> table's shape
      placement dy = in[0], table = in[1];
      if (table.is_shard(1)) {
        r.need[0] = shard_on(2);
        r.out = table;
      } else if (dy.is_shard(0)) {
        r.out = partial;
      } else if (dy.is_shard()) {
        r.out = r.need[0] = replicate;
      } else {
        r.out = dy;
      }
      break;
    }
    case op::cross_entropy_grad: {  // (logits, targets, dloss)
      placement logits = whole_last(in[0], 2);
      if (!logits.is_shard() && in[1].is_shard()) logits = in[1];
      r.need[0] = logits;
      r.need[1] = logits.is_shard() ? logits : replicate;
      r.need[2] = replicate;
      r.out = logits;
      break;
    }
    case op::ones:
      r.out = replicate;
      break;
    case op::vocab_statistics:  // added with vocab_axis set: decide_vocab_parallel
    case op::vocab_exp_sum:
    case op::vocab_log_sum_exp:
      break;
    case op::param_grad:
      r.out = r.need[0] = g[n.origin].spec[axis];
      if (n.deferred_axis == axis && in[0].is_partial() && g[n.origin].spec[axis].is_replicate())
        r.out = r.need[0] = partial;  // reduce-scattered by the optimizer (ZeRO-2/3)
      break;

    case op::concat:
    case op::slice:
    case op::slice_grad:
    case op::sum:
    case op::mean:
    case op::broadcast:
      r = decide_along_dimension(n, in);
      break;

    case op::custom:  // the op's sharding rule (passes/custom_sharding.hpp)
      r = decide_custom(n.custom->rule, in);
      break;
  }
  return r;
}

// The mesh axis that shards a cross-entropy's logits along their vocabulary, or -1.
constexpr int vocab_axis_of(const graph_view& g, const node& n) {
  const node& logits = g[n.inputs[0]];
  for (int axis = 0; axis < g.axes.size(); ++axis)
    if (logits.spec[axis].is_shard(logits.shape.rank() - 1)) return axis;
  return -1;
}

}  // namespace detail

namespace detail {

// Decides node i's placement on every axis and what it needs of its inputs; false (with the
// graph's diagnostic) where the annotations cannot be reconciled.
constexpr bool place_node(graph_ref g, int i) {
  node& n = g[i];
  for (int axis = 0; axis < g.axes.size(); ++axis) {
    axis_decision d = decide(g, n, axis);
    if (d.conflict != nullptr) {
      if (diagnostic* diag = g.report(i)) *diag << "on axis '" << g.axes.name(axis) << "': " << d.conflict;
      return false;
    }
    n.spec[axis] = d.out;
    for (int k = 0; k < n.input_count; ++k) n.required[k][axis] = d.need[k];
  }
  for (int a = 0; a < g.axes.size(); ++a)
    for (int b = a + 1; b < g.axes.size(); ++b)
      if (n.spec[a].is_shard() && n.spec[a] == n.spec[b])
        if (diagnostic* diag = g.report(i)) {
          *diag << "dimension " << int{n.spec[a].dim} << " would be sharded on both '" << g.axes.name(a)
                << "' and '" << g.axes.name(b) << "'. shard each dimension on one mesh axis (redistribute one input)";
          return false;
        }
  return true;
}

}  // namespace detail

template <std::size_t Capacity>
constexpr basic_graph<Capacity> propagate_sharding(const basic_graph<Capacity>& in) {
  basic_graph<Capacity> g = in;
  for (int i = 0; i < g.size() && g.ok(); ++i) {
    node& n = g[i];
    if (n.kind == op::cross_entropy || n.kind == op::cross_entropy_grad) n.vocab_axis = detail::vocab_axis_of(g, n);
    if (!detail::place_node(g, i)) return g;
  }
  return g;
}

}  // namespace shardgraph::passes
