#pragma once
// step_fusion: which steps of a rank's program the backend's calls take over, as one value per node
// that bind plans (plan/plan_step_fusion.hpp) and the executor reads.
//
//   plan::step_fusion f = plan::plan_step_fusion(inputs, plan::traits_of<Backend>());
//   plan::apply_producer_moves(f, steps);    // lifetimes start where the calls write the values
//   f.runs(i, seed_is_one);                  // false: f.taken_over_by[i]'s call writes node i
//   f.written_by(i, seed_is_one);            // the other values node i's call writes
//
// A call takes over: a bias, a bias gradient or an elementwise step after a product (its epilogue),
// the add after a norm's input gradient (and a tied table's after its lookup's gradient), the split
// and merge of heads around attention in the products' layout, the key's and value's gradients with
// the query's, a norm's weight gradient with its input gradient, the logits' gradient with the loss,
// and products of one input batched into the first one's call. A step taken over runs no call.
//
// Those values are written at another step than their own (dk and dv before theirs, with dq; a bias
// gradient after its own, with its weight product): the pass takes the step_index by const
// reference and returns those moves in `producer_moves`; the caller applies them to its step_index
// (apply_producer_moves), so that each value's lifetime starts at the step of the call that writes
// it (the memory plan reads the moved producer steps).
#include <cstddef>
#include <span>
#include <vector>

#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/plan/step_index.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph::plan {

// What the fusion planning reads of a rank's program, besides the backend's traits.
struct step_fusion_inputs {
  shardgraph::program_view program;
  const step_index& steps;  // the compiled program's producers and readers, before fusion
  const local_layout& layout;
  std::vector<bool> recomputed;      // per node: computed again inside the backward
  std::vector<bool> kept_per_layer;  // per node: an activation kept per layer for a later phase
  bool pipelined = false;            // micro-batches' forwards and backwards interleave
};

// The plan, per node.
struct step_fusion {
  struct epilogue {
    compute::product_epilogue kind = compute::product_epilogue::none;
    int out = -1;   // the node whose value the product's call writes (-1: no epilogue)
    int side = -1;  // kernel_call::side (-1: none)
  };
  struct written_value {
    int node = -1;      // a value the call writes
    int reported = -1;  // the node its finite check names
    friend bool operator==(const written_value&, const written_value&) = default;
  };
  struct producer_move {
    int node = -1;                           // a value written by another node's call
    std::size_t step = step_index::no_step;  // the step of that call: the value's lifetime starts there
  };

  std::vector<int> bias_epilogue_of;       // linear node -> the add_bias it absorbs (-1: none)
  std::vector<bool> bias_done_by_product;  // add_bias node -> its linear added the bias
  std::vector<int> bias_grad_of;        // linear_weight_grad or layer_norm_grad_w -> the bias_grad it writes
  std::vector<epilogue> epilogue_of;    // linear or norm gradient node -> its epilogue
  std::vector<int> written_by_product;  // node -> the product whose epilogue writes it (-1: its step)
  std::vector<bool> held_in_epilogue;   // node -> its value stays inside a product's epilogue
  std::vector<int> stored_in;     // node -> the split or merge of heads whose buffer holds it (-1: its own)
  std::vector<int> stored_from;   // split or merge node -> the node it holds (-1: it is computed)
  std::vector<bool> token_major;  // attention node -> its call is token-major
  // attention gradient -> the attention whose result it reads; cross_entropy_grad -> the
  // cross_entropy whose row statistics it reads (-1: none)
  std::vector<int> forward_output_of;
  std::vector<bool> output_kept;    // attention or cross_entropy node -> its gradients read what it kept
  std::vector<int> key_grad_of;     // attention_grad_q -> the attention_grad_k it writes (-1: none)
  std::vector<int> value_grad_of;   // attention_grad_q -> the attention_grad_v it writes (-1: none)
  std::vector<int> weight_grad_of;  // layer_norm_grad_x or rms_norm_grad_x -> the _grad_w it writes (-1)
  std::vector<int> logits_grad_of;  // cross_entropy -> the cross_entropy_grad it writes (-1: none)
  // linear or linear_weight_grad -> the products of the same sizes and first input it runs with in
  // one batched call (empty: none)
  std::vector<std::vector<int>> batched_with;

  // node -> the node whose call writes it, when that is not its own step's (-1: its own step runs).
  // Followed to the end: a bias gradient written with a weight gradient batched into another
  // product's call names that product.
  std::vector<int> taken_over_by;
  // node -> the values its call writes besides its own, in the order the finite check reads them
  // (empty for a node taken over)
  std::vector<std::vector<written_value>> written_by_call;
  std::vector<producer_move> producer_moves;  // in node order

  // Whether node i's own step runs its call. A cross-entropy gradient planned with its loss runs
  // apart when the backward's seed is not 1 (a loss scale): `seed_is_one` says which.
  bool runs(int i, bool seed_is_one) const {
    const int by = taken_over_by[at(i)];
    return by < 0 || (!seed_is_one && logits_grad_of[at(by)] == i);
  }
  // The values node i's call writes besides its own (a loss's call writes no gradient when the
  // seed is not 1).
  std::span<const written_value> written_by(int i, bool seed_is_one) const {
    if (!seed_is_one && logits_grad_of[at(i)] >= 0) return {};
    return written_by_call[at(i)];
  }

  // The node whose step's call writes v's bytes: a split or merge of heads holds its input's (whose
  // step writes it), and a product's epilogue writes the add_bias or elementwise value it took over.
  int writer_of(const graph_view& g, int v) const {
    const int held = stored_from[at(v)] >= 0 ? stored_from[at(v)] : v;
    if (written_by_product[at(held)] >= 0) return written_by_product[at(held)];
    return bias_done_by_product[at(held)] ? g[held].inputs[0] : held;
  }

 private:
  static std::size_t at(int i) { return static_cast<std::size_t>(i); }
};

// Moves the producer step of each value that another node's call writes to that call's step.
inline void apply_producer_moves(const step_fusion& f, step_index& steps) {
  for (const step_fusion::producer_move& w : f.producer_moves)
    steps.producer_step[static_cast<std::size_t>(w.node)] = w.step;
}

}  // namespace shardgraph::plan
