#pragma once
// split_vocab_parallel_loss: a cross_entropy whose logits are sharded along their vocabulary on a
// mesh axis (propagate_sharding set its vocab_axis) reduces its rows' statistics over that axis
// instead of gathering the logits, as Megatron-LM's vocabulary-parallel cross-entropy does. Each
// rank reads only its columns; the collectives move three numbers a row, not the logits.
//
//   stats = vocab_statistics(logits, targets)   (batch, seq, 2), Partial on the axis: [the target's
//           logit on the rank whose columns hold it (0 elsewhere), the log-sum-exp of the rank's
//           classes / ranks (0 for a rank without classes)]; summed, [target logit, m]
//   sums  = vocab_exp_sum(logits, stats)        (batch, seq), Partial: the sum over the rank's classes of
//           exp(x - m), m the mean of the ranks' log-sum-exps
//   lse   = vocab_log_sum_exp(stats, sums)      m + log(sums): the row's log-sum-exp over every class
//   loss  = cross_entropy(logits, targets, lse, stats)          the counted rows' lse - target logit
//   dlogits = cross_entropy_grad(logits, targets, dloss, lse)   (softmax - onehot) on the rank's columns
//
// insert_collectives then all-reduces stats and sums over the axis. Every term of sums is at most
// exp(lse_r - m) for its rank r, and some rank's lse_r is at least m, so sums >= 1; it overflows only
// where the ranks' log-sum-exps spread by more than the dtype's exponent range (88 in f32), which a
// kernel reports as an error rather than a silent infinity.
#include "shardgraph/ir/shape_rules.hpp"
#include "shardgraph/passes/propagate_sharding.hpp"

namespace shardgraph::passes {

namespace detail {

// A cross-entropy's statistics in the rewritten graph, found by its gradient through the same
// logits and targets.
struct vocab_loss_rows {
  int logits = -1, targets = -1, stats = -1, lse = -1;
};

template <std::size_t Capacity>
class vocab_loss_splitter {
 public:
  constexpr explicit vocab_loss_splitter(const basic_graph<Capacity>& in) : in_(in) {
    out_.axes = in.axes;
    out_.error = in.error;
  }

  constexpr basic_graph<Capacity> run() {
    for (int i = 0; i < in_.size() && out_.ok(); ++i) {
      node n = remapped(in_[i]);
      if (n.vocab_axis >= 0 && n.kind == op::cross_entropy) split_loss(n);
      if (n.vocab_axis >= 0 && n.kind == op::cross_entropy_grad) split_gradient(n);
      new_index_[i] = out_.add(n);
      if (n.vocab_axis >= 0) place(new_index_[i]);
    }
    return out_;
  }

 private:
  constexpr node remapped(node n) const {
    for (int k = 0; k < n.input_count; ++k) n.inputs[k] = new_index_[n.inputs[k]];
    if (n.region >= 0) n.region = new_index_[n.region];
    if (n.origin >= 0) n.origin = new_index_[n.origin];
    return n;
  }

  // Adds a statistics node of `kind` over (first, second) beside the loss `of`, named
  // "<loss>.<kind>" and placed by its signature.
  constexpr int add_rows(op kind, int first, int second, const node& of) {
    node s;
    s.kind = kind;
    s.name = of.name;
    s.name.append(".");
    s.name.append(op_name(kind));
    s.region = of.region;
    s.vocab_axis = of.vocab_axis;
    s.ignore_index = of.ignore_index;
    s.inputs[0] = first;
    s.inputs[1] = second;
    s.input_count = 2;
    const int i = out_.add(s);
    shape sh;
    dtype t = s.type;
    if (infer_shape(out_, i, sh, t)) {
      out_[i].shape = sh;
      out_[i].type = t;
    }
    place(i);
    return i;
  }

  constexpr void place(int i) {
    if (out_.ok()) place_node(out_, i);
  }

  // cross_entropy(logits, targets) -> cross_entropy(logits, targets, lse, stats)
  constexpr void split_loss(node& n) {
    if (losses_.size() == losses_.capacity()) {
      if (diagnostic* d = out_.report(n.inputs[0]))
        *d << "more than " << static_cast<int>(losses_.capacity())
           << " cross-entropies over vocabulary-sharded logits. sum the losses of one program into fewer";
      return;
    }
    vocab_loss_rows rows{n.inputs[0], n.inputs[1]};
    rows.stats = add_rows(op::vocab_statistics, rows.logits, rows.targets, n);
    const int sums = add_rows(op::vocab_exp_sum, rows.logits, rows.stats, n);
    rows.lse = add_rows(op::vocab_log_sum_exp, rows.stats, sums, n);
    losses_.push_back(rows);
    n.inputs[2] = rows.lse;
    n.inputs[3] = rows.stats;
    n.input_count = 4;
  }

  // cross_entropy_grad(logits, targets, dloss) -> cross_entropy_grad(logits, targets, dloss, lse),
  // the lse of its loss (the same logits and targets).
  constexpr void split_gradient(node& n) {
    for (const vocab_loss_rows& rows : losses_)
      if (rows.logits == n.inputs[0] && rows.targets == n.inputs[1]) {
        n.inputs[3] = rows.lse;
        n.input_count = 4;
        return;
      }
    if (diagnostic* d = out_.report(n.inputs[0]))
      *d << "a cross-entropy gradient over vocabulary-sharded logits has no cross_entropy of the same logits "
            "and targets. this is a bug in autodiff; please report it";
  }

  const basic_graph<Capacity>& in_;
  basic_graph<Capacity> out_;
  int new_index_[Capacity]{};
  static_vector<vocab_loss_rows, 8> losses_;
};

}  // namespace detail

template <std::size_t Capacity>
constexpr basic_graph<Capacity> split_vocab_parallel_loss(const basic_graph<Capacity>& in) {
  if (!in.ok()) return in;
  bool any = false;
  for (const node& n : in.nodes) any = any || n.vocab_axis >= 0;
  return any ? detail::vocab_loss_splitter(in).run() : in;
}

}  // namespace shardgraph::passes
