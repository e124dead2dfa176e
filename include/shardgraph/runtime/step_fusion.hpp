#pragma once
// Which steps of a rank's program the backend's calls take over, planned by bind from the step
// list and the backend's declared abilities (compute/compute_backend.hpp): a bias, a bias gradient
// or an elementwise step after a product done in the product's epilogue, the add after a norm's
// input gradient done by the norm's kernel (and a tied table's after its lookup's gradient), attention
// reading and writing the products' layout (no split or merge of heads) and its backward reading the
// forward's result. The executor skips the steps taken over and hands their values to the calls that write
// them.
#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph {

// What the planning reads of a rank's program.
struct step_graph {
  static constexpr std::size_t no_step = static_cast<std::size_t>(-1);
  const shardgraph::program& program;
  const std::vector<std::vector<int>>& readers;  // per node: the nodes reading it
  // per node: the step computing it (no_step: none); a bias gradient that its weight product
  // writes moves to the product's step (its lifetime starts there)
  std::vector<std::size_t>& producer_step;
  const local_layout& layout;
  std::function<bool(int)> recomputed;  // the node is computed again inside the backward
  std::function<bool(int)> per_layer;   // the node's value is kept per layer for a later phase
  bool pipelined = false;               // micro-batches' forwards and backwards interleave
};

// The plan, per node.
struct step_fusion {
  struct epilogue {
    compute::product_epilogue kind = compute::product_epilogue::none;
    int out = -1;   // the node whose value the product's call writes (-1: no epilogue)
    int side = -1;  // kernel_call::side (-1: none)
  };
  std::vector<int> bias_epilogue_of;       // linear node -> the add_bias it absorbs (-1: none)
  std::vector<bool> bias_done_by_product;  // add_bias node -> its linear added the bias
  std::vector<int> bias_grad_of;           // linear_weight_grad node -> the bias_grad it writes (-1: none)
  std::vector<bool> bias_grad_by_product;  // bias_grad node -> a linear_weight_grad writes it
  std::vector<epilogue> epilogue_of;       // linear or norm gradient node -> its epilogue
  std::vector<int> written_by_product;     // node -> the product whose epilogue writes it (-1: its step)
  std::vector<bool> held_in_epilogue;      // node -> its value stays inside a product's epilogue
  std::vector<int> stored_in;     // node -> the split or merge of heads whose buffer holds it (-1: its own)
  std::vector<int> stored_from;   // split or merge node -> the node it holds (-1: it is computed)
  std::vector<bool> token_major;  // attention node -> its call is token-major
  // attention gradient -> the attention whose result it reads; cross_entropy_grad -> the
  // cross_entropy whose row statistics it reads (-1: none)
  std::vector<int> forward_output_of;
  std::vector<bool> output_kept;       // attention or cross_entropy node -> its gradients read what it kept
  std::vector<int> key_grad_of;        // attention_grad_q -> the attention_grad_k it writes (-1: none)
  std::vector<int> value_grad_of;      // attention_grad_q -> the attention_grad_v it writes (-1: none)
  std::vector<bool> made_with_query;   // attention_grad_k or _v -> its attention_grad_q writes it
  std::vector<int> weight_grad_of;     // layer_norm_grad_x or rms_norm_grad_x -> the _grad_w it writes (-1)
  std::vector<bool> made_with_input_grad;  // layer_norm_grad_w or rms_norm_grad_w -> its _grad_x writes it
  std::vector<int> logits_grad_of;         // cross_entropy -> the cross_entropy_grad it writes (-1: none)
  std::vector<bool> made_with_loss;        // cross_entropy_grad -> its cross_entropy writes it
  // linear or linear_weight_grad -> the products of the same sizes and first input it runs with in
  // one batched call (empty: none); those products' steps are then skipped
  std::vector<std::vector<int>> batched_with;
  std::vector<bool> made_in_batch;  // linear or linear_weight_grad -> an earlier product's call runs it

  // The node whose step's call writes v's bytes: a split or merge of heads holds its input's (whose
  // step writes it), and a product's epilogue writes the add_bias or elementwise value it took over.
  int writer_of(const graph& g, int v) const {
    const auto at = [](int i) { return static_cast<std::size_t>(i); };
    const int held = stored_from[at(v)] >= 0 ? stored_from[at(v)] : v;
    if (written_by_product[at(held)] >= 0) return written_by_product[at(held)];
    return bias_done_by_product[at(held)] ? g[held].inputs[0] : held;
  }
};

namespace detail {

template <class Backend>
class step_fusion_planner {
 public:
  explicit step_fusion_planner(step_graph in) : in_(std::move(in)) {}
  step_fusion plan() {
    plan_bias_epilogues();
    plan_bias_grad_epilogues();
    plan_product_epilogues();
    plan_token_major_attention();
    plan_attention_output_reuse();
    plan_cross_entropy_statistics();
    plan_cross_entropy_gradient_with_loss();
    plan_attention_gradients_together();
    plan_norm_gradients_together();
    plan_products_batched();
    return std::move(fused_);
  }

 private:
  static constexpr std::size_t no_step = step_graph::no_step;
  static std::size_t index(int i) { return static_cast<std::size_t>(i); }

  // linear -> add_bias pairs whose bias the backend adds in the product's epilogue: the linear's
  // plain product is read by nothing else, so the linear writes x w + b straight into the add_bias
  // node's value, and the chain starting at that add_bias skips it (an add_bias step of its own,
  // as before split_heads or gelu, runs no kernel at all).
  void plan_bias_epilogues() {
    const graph& g = in_.program.nodes;
    fused_.bias_epilogue_of.assign(index(g.size()), -1);
    fused_.bias_done_by_product.assign(index(g.size()), false);
    if constexpr (requires { requires Backend::linear_bias_epilogue; }) {
      for (const step& st : in_.program.steps) {
        const bool chain = st.kind == step_kind::fused;
        if (!chain && !(st.kind == step_kind::compute && g[st.node].kind == op::add_bias)) continue;
        const int j = chain ? st.first : st.node;
        const node& n = g[j];
        if (n.kind != op::add_bias || n.input_count != 2) continue;
        const int product = n.inputs[0];
        if (g[product].kind != op::linear || in_.readers[index(product)].size() != 1) continue;
        if (g[product].type != n.type || g[n.inputs[1]].type != n.type) continue;
        fused_.bias_epilogue_of[index(product)] = j;
        fused_.bias_done_by_product[index(j)] = true;
      }
    }
  }

  // bias_grad -> linear_weight_grad pairs reading the same output gradient dy, for backends declaring
  // linear_bias_grad_epilogue: the weight product also writes the bias gradient (cuBLASLt sums dy's
  // rows in its epilogue as it reads them), and the bias_grad step is skipped. The product's step
  // comes later (autodiff emits the bias's gradient first), so the pair is taken only when nothing
  // reads the bias gradient in between; its value is then written at the product's step.
  // Likewise bias_grad -> layer_norm_grad_w pairs (a layer norm's bias and weight gradients), for
  // backends declaring norm_bias_grad_fused: the norm's weight gradient comes first, so the bias
  // gradient is written earlier than its own step, where nothing can have read it yet.
  void plan_bias_grad_epilogues() {
    const graph& g = in_.program.nodes;
    fused_.bias_grad_of.assign(index(g.size()), -1);
    fused_.bias_grad_by_product.assign(index(g.size()), false);
    constexpr bool products = requires { requires Backend::linear_bias_grad_epilogue; };
    constexpr bool norms = requires { requires Backend::norm_bias_grad_fused; };
    if constexpr (products || norms) {
      for (int j = 0; j < g.size(); ++j) {
        if (g[j].kind != op::bias_grad || !computed_alone(j)) continue;
        const int dy = g[j].inputs[0];
        for (int k : in_.readers[index(dy)]) {
          const bool product = products && g[k].kind == op::linear_weight_grad;
          const bool norm = norms && g[k].kind == op::layer_norm_grad_w;
          if ((!product && !norm) || g[k].inputs[1] != dy || fused_.bias_grad_of[index(k)] >= 0 ||
              !computed_alone(k) || g[k].region != g[j].region || g[k].type != g[j].type)
            continue;
          const std::size_t weight_step = in_.producer_step[index(k)];
          if (product && weight_step < in_.producer_step[index(j)]) continue;
          bool read_between = false;
          for (int r : in_.readers[index(j)])
            read_between = read_between || in_.producer_step[index(r)] <= weight_step;
          if (read_between) continue;
          fused_.bias_grad_of[index(k)] = j;
          fused_.bias_grad_by_product[index(j)] = true;
          in_.producer_step[index(j)] = weight_step;  // its lifetime starts there (the memory plan)
          break;
        }
      }
    }
  }

  // Whether a compute step of its own writes node i (not a fused chain, a copy or a collective).
  bool computed_alone(int i) const {
    const std::size_t s = in_.producer_step[index(i)];
    return s != no_step && in_.program.steps[s].kind == step_kind::compute && in_.program.steps[s].node == i;
  }

  // Elementwise steps that a linear's product does in its epilogue (compute::product_epilogue), for
  // backends declaring linear_epilogues. The step is skipped: the product's call writes its value,
  // which is live from the product's step on.
  //   gelu       linear [-> add_bias] -> gelu; the pre-activation is written (as side) only when
  //              something else reads it: gelu_grad, in training
  //   gelu_grad  linear -> gelu_grad(x, dy = the product): the backward of the MLP's activation
  //   add        linear [-> add_bias] -> add(product, v), v computed before the product: the residual
  //              add after a projection, or a gradient summed from two branches (q's, k's and v's);
  //              also after layer_norm_grad_x or rms_norm_grad_x (norm_grad_add_epilogue): the
  //              residual stream's gradient, summed with the norm branch's; and after
  //              embedding_grad (embedding_grad_add_epilogue): a tied table's gradient, the output
  //              layer's weight gradient plus the lookup's, written straight into the parameter's
  //              gradient buffer
  // The product's own value, and the add_bias's unless it is the kept pre-activation, is not kept.
  void plan_product_epilogues() {
    const graph& g = in_.program.nodes;
    fused_.epilogue_of.assign(index(g.size()), {});
    fused_.written_by_product.assign(index(g.size()), -1);
    fused_.held_in_epilogue.assign(index(g.size()), false);
    constexpr bool linears = requires { requires Backend::linear_epilogues; };
    constexpr bool norms = requires { requires Backend::norm_grad_add_epilogue; };
    constexpr bool tables = requires { requires Backend::embedding_grad_add_epilogue; };
    if constexpr (linears || norms || tables) {
      const auto adds_after = [&](op kind) {  // a producer whose call can add a value to its result
        return (linears && kind == op::linear) ||
               (norms && (kind == op::layer_norm_grad_x || kind == op::rms_norm_grad_x)) ||
               (tables && kind == op::embedding_grad);
      };
      const auto only_reader = [&](int i, int r) {
        return in_.readers[index(i)].size() == 1 && in_.readers[index(i)][0] == r;
      };
      const auto before = [&](int v, int step_node) {  // v is computed before step_node's step
        const std::size_t s = in_.producer_step[index(v)];
        return s != no_step && s < in_.producer_step[index(step_node)];
      };
      for (const step& st : in_.program.steps) {
        if (st.kind != step_kind::compute && st.kind != step_kind::fused) continue;
        const int k = st.node;
        const node& n = g[k];
        if (n.kind != op::gelu && n.kind != op::gelu_grad && n.kind != op::add) continue;
        // pre: the value k reads that the product's call writes (an add_bias whose bias the product
        // added, or the product itself); a fused step is that add_bias and k, nothing more.
        int pre = -1;
        if (st.kind == step_kind::fused) {
          if (!linears || st.first + 1 != k || !fused_.bias_done_by_product[index(st.first)]) continue;
          pre = st.first;
        } else {
          // Of an add's two inputs, the one computed last (the other must be there before it).
          for (int a = 0; a < n.input_count; ++a) {
            const int v = n.inputs[a];
            if (n.kind == op::gelu_grad && a != 1) continue;  // gelu_grad(x, dy): dy is the product
            const bool candidate =
                (linears && fused_.bias_done_by_product[index(v)]) ||
                ((n.kind == op::add ? adds_after(g[v].kind) : linears && g[v].kind == op::linear) &&
                 computed_alone(v) && fused_.bias_epilogue_of[index(v)] < 0 && only_reader(v, k));
            if (candidate && (pre < 0 || in_.producer_step[index(v)] > in_.producer_step[index(pre)]))
              pre = v;
          }
          if (pre < 0) continue;
        }
        const int product = fused_.bias_done_by_product[index(pre)] ? g[pre].inputs[0] : pre;
        if (!computed_alone(product) || fused_.epilogue_of[index(product)].out >= 0 ||
            g[product].region != n.region || g[product].type != n.type || g[pre].type != n.type)
          continue;
        // A parameter's gradient is written in place by its own step (plan_gradients_in_place),
        // except a tied table's: the sum's value is the gradient buffer, which the lookup's
        // gradient call writes (nothing else reads the buffer before the sum's step).
        bool read_by_param_grad = false;
        for (int r : in_.readers[index(k)])
          read_by_param_grad = read_by_param_grad || g[r].kind == op::param_grad;
        if (read_by_param_grad && g[product].kind != op::embedding_grad) continue;
        step_fusion::epilogue e{.out = k};
        if (n.kind == op::gelu) {
          e.kind = compute::product_epilogue::gelu;
          if (!only_reader(pre, k)) e.side = pre;  // the pre-activation, kept for gelu_grad
        } else if (n.kind == op::gelu_grad) {
          if (pre != product || !before(n.inputs[0], product)) continue;
          e.kind = compute::product_epilogue::gelu_grad;
          e.side = n.inputs[0];
        } else {
          const int other = n.inputs[0] == pre ? n.inputs[1] : n.inputs[0];
          if (other == pre || !only_reader(pre, k) || !before(other, product) || g[other].type != n.type ||
              in_.layout.of(other).numel() != in_.layout.of(k).numel())
            continue;
          e.kind = compute::product_epilogue::add;
          e.side = other;
        }
        fused_.epilogue_of[index(product)] = e;
        fused_.written_by_product[index(k)] = product;
        if (e.side != pre) fused_.held_in_epilogue[index(pre)] = true;
      }
    }
  }

  // Attention in the products' layout, for backends declaring attention_token_major: a split_heads
  // whose readers are all attention (or its gradients) is skipped, its input's step writing the
  // bytes straight into its buffer ((batch, seq, heads, head_dim) is the input's layout); an
  // attention's (or gradient's) result read only by a merge_heads is written straight into the
  // merge's buffer, and the merge skipped. The attention calls then say token_major. All or
  // nothing per call: each of its q, k, v (and dout) must come so and its result leave so.
  void plan_token_major_attention() {
    const graph& g = in_.program.nodes;
    fused_.stored_in.assign(index(g.size()), -1);
    fused_.stored_from.assign(index(g.size()), -1);
    fused_.token_major.assign(index(g.size()), false);
    if constexpr (requires { requires Backend::attention_token_major; }) {
      const auto attention = [&](int i) {
        const op k = g[i].kind;
        return k == op::attention || k == op::attention_grad_q || k == op::attention_grad_k ||
               k == op::attention_grad_v;
      };
      // Whether `from`'s value can live in `to`'s buffer, to being its one reader and a layout step.
      const auto held_in = [&](int from, int to, op layout_op) {
        const std::size_t s = in_.producer_step[index(from)];
        return g[to].kind == layout_op && computed_alone(to) && in_.readers[index(from)].size() == 1 &&
               in_.readers[index(from)][0] == to && s != no_step && in_.program.steps[s].node == from &&
               (in_.program.steps[s].kind == step_kind::compute ||
                in_.program.steps[s].kind == step_kind::fused) &&
               g[from].type == g[to].type && g[from].region == g[to].region &&
               in_.layout.of(from).numel() == in_.layout.of(to).numel() &&
               in_.recomputed(from) == in_.recomputed(to);
      };
      for (int i = 0; i < g.size(); ++i) fused_.token_major[index(i)] = attention(i) && computed_alone(i);
      const auto split_in_place = [&](int s) {  // every reader of split s a token-major call
        if (!held_in(g[s].inputs[0], s, op::split_heads)) return false;
        for (int r : in_.readers[index(s)])
          if (!fused_.token_major[index(r)]) return false;
        return true;
      };
      const auto takes = [&](int i) {
        if (in_.readers[index(i)].size() != 1 || !held_in(i, in_.readers[index(i)][0], op::merge_heads))
          return false;
        for (int k = 0; k < (g[i].kind == op::attention ? 3 : 4); ++k)
          if (!split_in_place(g[i].inputs[k])) return false;
        return true;
      };
      for (bool changed = true; changed;) {  // dropping one call may leave a split another needs
        changed = false;
        for (int i = 0; i < g.size(); ++i)
          if (fused_.token_major[index(i)] && !takes(i)) fused_.token_major[index(i)] = false, changed = true;
      }
      for (int i = 0; i < g.size(); ++i) {
        if (!fused_.token_major[index(i)]) continue;
        for (int k = 0; k < (g[i].kind == op::attention ? 3 : 4); ++k) {
          const int split = g[i].inputs[k];
          fused_.stored_in[index(g[split].inputs[0])] = split;
          fused_.stored_from[index(split)] = g[split].inputs[0];
        }
        const int merge = in_.readers[index(i)][0];
        fused_.stored_in[index(i)] = merge;
        fused_.stored_from[index(merge)] = i;
      }
    }
  }

  // For backends declaring attention_output_reuse: an attention gradient reads the forward's result
  // (kernel_call::side) where that result stays in memory of its own until then: a token-major
  // result held in its merge's per-layer buffer, which the backward keeps anyway (the projection's
  // weight gradient reads it). No value is kept longer for it. The forward's call says output_kept.
  void plan_attention_output_reuse() {
    const graph& g = in_.program.nodes;
    fused_.forward_output_of.assign(index(g.size()), -1);
    fused_.output_kept.assign(index(g.size()), false);
    if constexpr (requires { requires Backend::attention_output_reuse; }) {
      for (int i = 0; i < g.size(); ++i) {
        if (!fused_.token_major[index(i)] || g[i].kind == op::attention) continue;  // a token-major gradient
        for (int a : in_.readers[index(g[i].inputs[0])]) {  // its forward: the attention of these q, k, v
          if (g[a].kind != op::attention || g[a].inputs[1] != g[i].inputs[1] ||
              g[a].inputs[2] != g[i].inputs[2] || !fused_.token_major[index(a)] ||
              fused_.stored_in[index(a)] < 0 || !in_.per_layer(fused_.stored_in[index(a)]))
            continue;
          fused_.forward_output_of[index(i)] = a;
          fused_.output_kept[index(a)] = true;
        }
      }
    }
  }

  // For backends declaring cross_entropy_statistics_kept: the cross-entropy gradient reads the rows'
  // log-sum-exp that the loss's call kept with the logits (output_kept; the gradient's side is the
  // loss) instead of computing it again in a pass over the logits. Every value is written once, so
  // the logits are unchanged in between.
  void plan_cross_entropy_statistics() {
    if constexpr (requires { requires Backend::cross_entropy_statistics_kept; }) {
      const graph& g = in_.program.nodes;
      for (int i = 0; i < g.size(); ++i) {
        if (g[i].kind != op::cross_entropy_grad) continue;
        for (int f : in_.readers[index(g[i].inputs[0])])
          if (g[f].kind == op::cross_entropy && g[f].inputs[1] == g[i].inputs[1]) {
            fused_.forward_output_of[index(i)] = f;
            fused_.output_kept[index(f)] = true;
          }
      }
    }
  }

  // For backends declaring cross_entropy_gradient_with_loss: the loss's call also writes the
  // logits' gradient, for a gradient whose loss gradient is the backward's seed (op::ones). One
  // read of each row makes both, and the gradient's step is skipped; nothing in between writes the
  // logits or the targets (every value is written once). The gradient's lifetime starts at the
  // loss's step (the memory plan), where it may take the logits' memory. It supersedes the kept
  // statistics. The seed is 1 but under a loss scale (executor::set_loss_scale); then the executor
  // runs the two steps apart (the gradient's computing the rows' statistics again). Pipelines
  // interleave micro-batches between a loss and its gradient, and recomputed or per-layer values
  // are not planned.
  void plan_cross_entropy_gradient_with_loss() {
    const graph& g = in_.program.nodes;
    fused_.logits_grad_of.assign(index(g.size()), -1);
    fused_.made_with_loss.assign(index(g.size()), false);
    if constexpr (requires { requires Backend::cross_entropy_gradient_with_loss; }) {
      if (in_.pipelined) return;
      for (int i = 0; i < g.size(); ++i) {
        if (g[i].kind != op::cross_entropy_grad || !computed_alone(i) || g[i].input_count != 3) continue;
        if (g[g[i].inputs[2]].kind != op::ones) continue;
        const int logits = g[i].inputs[0];
        if (g[i].type != g[logits].type || in_.recomputed(i) || in_.per_layer(i)) continue;
        for (int f : in_.readers[index(logits)]) {
          if (g[f].kind != op::cross_entropy || g[f].inputs[1] != g[i].inputs[1] || !computed_alone(f) ||
              g[f].region != g[i].region || in_.recomputed(f) || fused_.logits_grad_of[index(f)] >= 0 ||
              in_.producer_step[index(f)] == no_step ||
              in_.producer_step[index(f)] > in_.producer_step[index(i)])
            continue;
          fused_.logits_grad_of[index(f)] = i;
          fused_.made_with_loss[index(i)] = true;
          fused_.output_kept[index(f)] = false;
          fused_.forward_output_of[index(i)] = -1;
          in_.producer_step[index(i)] = in_.producer_step[index(f)];  // its lifetime starts there
          break;
        }
      }
    }
  }

  // For backends declaring attention_gradients_together: an attention_grad_q call also writes the
  // attention_grad_k and _v of the same operands (a flash backward makes all three at once), whose
  // steps are then skipped. They come after it (autodiff emits q, k, v in turn), so dk and dv are
  // written before their own steps, where nothing can have read them yet: their lifetimes then
  // start at the query gradient's step (the memory plan).
  void plan_attention_gradients_together() {
    const graph& g = in_.program.nodes;
    fused_.key_grad_of.assign(index(g.size()), -1);
    fused_.value_grad_of.assign(index(g.size()), -1);
    fused_.made_with_query.assign(index(g.size()), false);
    if constexpr (requires { requires Backend::attention_gradients_together; }) {
      for (int i = 0; i < g.size(); ++i) {
        if (g[i].kind != op::attention_grad_q || !computed_alone(i)) continue;
        const std::size_t query_step = in_.producer_step[index(i)];
        const auto sibling = [&](op kind) {
          for (int j : in_.readers[index(g[i].inputs[0])]) {
            if (g[j].kind != kind || !computed_alone(j) || g[j].region != g[i].region ||
                g[j].type != g[i].type || fused_.token_major[index(j)] != fused_.token_major[index(i)] ||
                fused_.forward_output_of[index(j)] != fused_.forward_output_of[index(i)] ||
                in_.producer_step[index(j)] < query_step)
              continue;
            bool same_operands = true;
            for (int k = 0; k < 4; ++k) same_operands = same_operands && g[j].inputs[k] == g[i].inputs[k];
            if (same_operands) return j;
          }
          return -1;
        };
        const int k = sibling(op::attention_grad_k), v = sibling(op::attention_grad_v);
        if (k < 0 || v < 0) continue;
        fused_.key_grad_of[index(i)] = k;
        fused_.value_grad_of[index(i)] = v;
        for (int j : {k, v}) {
          fused_.made_with_query[index(j)] = true;
          in_.producer_step[index(j)] = query_step;  // its lifetime starts there (the memory plan)
        }
      }
    }
  }

  // For backends declaring norm_gradients_together: a norm's input gradient call also writes the
  // weight gradient of the same x and dy (and the bias gradient paired with that, planned above),
  // whose step is then skipped: one pass over x and dy for all three. The weight gradient comes
  // after the input gradient (autodiff emits x's first), so it and its bias gradient are written
  // before their own steps, where nothing can have read them yet: their lifetimes then start at
  // the input gradient's step. Under tensor parallelism dy differs (the weight gradient reads the
  // all-reduced one), and nothing pairs.
  void plan_norm_gradients_together() {
    const graph& g = in_.program.nodes;
    fused_.weight_grad_of.assign(index(g.size()), -1);
    fused_.made_with_input_grad.assign(index(g.size()), false);
    if constexpr (requires { requires Backend::norm_gradients_together; }) {
      for (int i = 0; i < g.size(); ++i) {
        const op kind = g[i].kind;
        if ((kind != op::layer_norm_grad_x && kind != op::rms_norm_grad_x) || !computed_alone(i)) continue;
        const op weight_kind = kind == op::layer_norm_grad_x ? op::layer_norm_grad_w : op::rms_norm_grad_w;
        const std::size_t input_step = in_.producer_step[index(i)];
        for (int j : in_.readers[index(g[i].inputs[0])]) {
          if (g[j].kind != weight_kind || g[j].inputs[0] != g[i].inputs[0] ||
              g[j].inputs[1] != g[i].inputs[2] || !computed_alone(j) || g[j].region != g[i].region ||
              g[j].type != g[i].type || g[j].scalar != g[i].scalar ||
              in_.producer_step[index(j)] < input_step || fused_.made_with_input_grad[index(j)])
            continue;
          fused_.weight_grad_of[index(i)] = j;
          fused_.made_with_input_grad[index(j)] = true;
          in_.producer_step[index(j)] = input_step;  // its lifetime starts there (the memory plan)
          if (fused_.bias_grad_of[index(j)] >= 0)
            in_.producer_step[index(fused_.bias_grad_of[index(j)])] = input_step;
          break;
        }
      }
    }
  }

  // For backends declaring products_batched: products of the same sizes that read the same input
  // run as one batched call at the first one's step (kernel_call::batch), where their buffers lie at
  // equal strides (bind places them so). Attention's q, k and v: three (model, model) products of
  // the same normed x forward, and three weight gradients of that x and dq, dk, dv backward; one
  // batched product fills the GPU better than three small ones. Each other product's weight and bias
  // are parameters, or its dy is written before the first one's step (dk and dv, made with dq), and
  // its results are written before their own steps, where nothing can have read them yet: their
  // lifetimes then start at the first one's step. A product with an epilogue other than its bias
  // (gelu, add) is not batched. Pipelines (micro-batch banks) and ZeRO-3 (gathered weights) are
  // left out.
  void plan_products_batched() {
    const graph& g = in_.program.nodes;
    fused_.batched_with.assign(index(g.size()), {});
    fused_.made_in_batch.assign(index(g.size()), false);
    if constexpr (requires { requires Backend::products_batched; }) {
      if (in_.pipelined || in_.program.zero_stage >= 3) return;
      const auto written_at = [&](int v) { return in_.producer_step[index(fused_.writer_of(g, v))]; };
      const auto eligible = [&](int i) {
        const node& n = g[i];
        if ((n.kind != op::linear && n.kind != op::linear_weight_grad) || !computed_alone(i) ||
            fused_.made_in_batch[index(i)] || in_.recomputed(i))
          return false;
        if (n.kind == op::linear)
          return fused_.epilogue_of[index(i)].out < 0 && g[n.inputs[1]].kind == op::parameter &&
                 (fused_.bias_epilogue_of[index(i)] < 0 ||
                  g[g[fused_.bias_epilogue_of[index(i)]].inputs[1]].kind == op::parameter);
        return true;
      };
      for (const step& st : in_.program.steps) {
        const int i = st.node;
        if (st.kind != step_kind::compute || !eligible(i) || !fused_.batched_with[index(i)].empty()) continue;
        const node& n = g[i];
        const std::size_t first_step = in_.producer_step[index(i)];
        for (int j : in_.readers[index(n.inputs[0])]) {
          const node& m = g[j];
          if (j == i || !eligible(j) || m.kind != n.kind || m.inputs[0] != n.inputs[0] || m.type != n.type ||
              m.region != n.region || m.transpose_b != n.transpose_b ||
              in_.producer_step[index(j)] <= first_step || g[m.inputs[1]].type != g[n.inputs[1]].type ||
              in_.layout.of(m.inputs[1]).local != in_.layout.of(n.inputs[1]).local ||
              in_.layout.of(j).local != in_.layout.of(i).local)
            continue;
          if (n.kind == op::linear) {
            if ((fused_.bias_epilogue_of[index(j)] < 0) != (fused_.bias_epilogue_of[index(i)] < 0)) continue;
          } else if ((fused_.bias_grad_of[index(j)] < 0) != (fused_.bias_grad_of[index(i)] < 0) ||
                     written_at(m.inputs[1]) >= first_step) {
            continue;  // dy comes after the first product's step
          }
          fused_.batched_with[index(i)].push_back(j);
          fused_.made_in_batch[index(j)] = true;
          in_.producer_step[index(j)] = first_step;  // its lifetime starts there (the memory plan)
          if (fused_.bias_grad_of[index(j)] >= 0)
            in_.producer_step[index(fused_.bias_grad_of[index(j)])] = first_step;
        }
      }
    }
  }

  step_graph in_;
  step_fusion fused_;
};

}  // namespace detail

// The plan for Backend's declared abilities (none declared: nothing fused).
template <class Backend>
step_fusion plan_step_fusion(step_graph in) {
  return detail::step_fusion_planner<Backend>(std::move(in)).plan();
}

}  // namespace shardgraph
