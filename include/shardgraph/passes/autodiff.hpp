#pragma once
// autodiff: appends the backward graph (reverse mode) of the output named "loss".
//
// Every forward op has a gradient rule written with ordinary or gradient ops, so that
// propagate_sharding, run afterwards over forward and backward together, derives the backward
// placements from the same signatures: a Replicate weight used with dp-sharded activations gets a
// Partial gradient, and since each `param_grad` must have its parameter's placement,
// insert_collectives adds the all_reduce (or reduce_scatter) that data parallelism needs.
//
// A custom op's gradient is its own backward (ir/custom_gradient.hpp): DSL ops that autodiff adds
// through a graph_builder over the graph it differentiates, in the current backward region.
//
// A repeat block's backward is a reversed block: `repeat_begin` with `reverse` runs the layers
// last to first, reading each layer's saved forward values, and its `repeat_end` yields the
// gradient of the block's input. Parameters declared inside the block get one gradient per layer.
//
//   forward   x0 -> [begin h: body -> end h] -> ... -> loss
//   backward  d.loss (ones) -> ... -> [begin d.h (reverse): body^T -> end d.h] -> dx0
#include <initializer_list>
#include <string_view>

#include "shardgraph/ir/builder.hpp"
#include "shardgraph/ir/custom_gradient.hpp"
#include "shardgraph/ir/graph.hpp"
#include "shardgraph/ir/shape_rules.hpp"

namespace shardgraph::passes {

namespace detail {

template <std::size_t Capacity>
class gradient_builder {
 public:
  constexpr gradient_builder(graph_builder& b, int deferred_axis)
      : b_(b), g_(b.value()), forward_count_(g_.size()), deferred_axis_(deferred_axis) {
    for (int& d : grad_) d = -1;
  }

  constexpr void run() {
    for (int i = 0; i < g_.size(); ++i)
      if (g_[i].kind == op::param_grad || g_[i].kind == op::ones) {
        if (diagnostic* d = g_.report(i)) *d << "the graph is already differentiated. apply autodiff once, to a forward graph";
        return;
      }
    int loss = find_loss();
    if (loss < 0) return;
    node seed;
    seed.kind = op::ones;
    seed.type = g_[loss].type;
    grad_[loss] = emit(seed, "loss");
    sweep(forward_count_ - 1, 0);
  }

 private:
  constexpr int find_loss() {
    int found = -1;
    for (int i = 0; i < g_.size(); ++i)
      if (g_[i].kind == op::output && g_[i].name.view() == "loss") found = g_[i].inputs[0];
    if (found < 0 && g_.size() > 0)
      if (diagnostic* d = g_.report(g_.size() - 1))
        *d << "training needs a scalar output named \"loss\". mark it with output(cross_entropy(...), \"loss\")";
    if (found >= 0 && g_[found].shape.rank() != 0)
      if (diagnostic* d = g_.report(found)) *d << "the loss must be a scalar. reduce it to one value, e.g. with cross_entropy";
    return g_.ok() ? found : -1;
  }

  // Appends node n (inputs set) in the current backward region, named "d.<forward name>".
  constexpr int emit(node n, std::string_view forward_name, std::string_view prefix = "d.") {
    n.name.assign(prefix);
    n.name.append(forward_name);
    n.region = region_;
    int i = g_.add(n);
    shape s;
    dtype t = n.type;
    if (infer_shape(g_, i, s, t)) {
      g_[i].shape = s;
      g_[i].type = t;
    }
    return i;
  }
  constexpr int make(op kind, std::initializer_list<int> inputs, int forward, double scalar = 0.0, bool transpose_b = false) {
    node n;
    n.kind = kind;
    n.scalar = scalar;
    n.transpose_b = transpose_b;
    for (int x : inputs) n.inputs[n.input_count++] = x;
    n.type = g_[forward].type;
    return emit(n, g_[forward].name.view());
  }

  // Adds a gradient contribution to forward node j (integer inputs and token ids take none).
  constexpr void accumulate(int j, int contribution) {
    const node& target = g_[j];
    if (target.kind == op::input || !is_floating(target.type)) return;
    if (region_ >= 0) {
      const int block = g_[region_].origin;
      if (j != block && target.body() != block) {
        if (diagnostic* d = g_.report(j))
          *d << "is used inside repeat block '" << g_[block].name.view()
             << "' but lives outside it: its gradient would have to be summed over the layers, which autodiff "
                "does not do yet. declare it inside the block, or pass it in through the block's input";
        return;
      }
    }
    if (grad_[j] < 0) {
      grad_[j] = contribution;
      return;
    }
    grad_[j] = make(op::add, {grad_[j], contribution}, j);
  }

  constexpr void sweep(int from, int down_to) {
    for (int i = from; i >= down_to && g_.ok(); --i) {
      if (grad_[i] < 0) continue;
      const node n = g_[i];
      if (n.kind == op::repeat_end) {
        reverse_block(i, n);
        i = n.region;  // continue below the block's begin
        continue;
      }
      backward_of(i, n, grad_[i]);
    }
  }

  constexpr void reverse_block(int end, const node& n) {
    const int begin = n.region;
    node rb;
    rb.kind = op::repeat_begin;
    rb.reverse = true;
    rb.origin = begin;
    rb.inputs[0] = grad_[end];
    rb.input_count = 1;
    rb.type = n.type;
    const int outer = region_;
    const int reversed = emit(rb, g_[begin].name.view());
    region_ = reversed;
    accumulate(n.inputs[0], reversed);
    sweep(end - 1, begin + 1);
    if (!g_.ok()) return;
    if (grad_[begin] < 0) {
      if (diagnostic* d = g_.report(end)) *d << "the loss does not depend on the block's input. make the block use x";
      return;
    }
    node re;
    re.kind = op::repeat_end;
    re.inputs[0] = grad_[begin];
    re.input_count = 1;
    re.type = n.type;
    const int closing = g_.add([&] {
      node m = re;
      m.name.assign("d.");
      m.name.append(g_[begin].name.view());
      m.region = reversed;
      m.shape = g_[reversed].shape;
      return m;
    }());
    region_ = outer;
    accumulate(g_[begin].inputs[0], closing);
  }

  constexpr void backward_of(int i, const node& n, int dy) {
    const int x = n.inputs[0], w = n.inputs[1];
    switch (n.kind) {
      case op::input:
      case op::output:
        return;
      case op::parameter: {
        node p;
        p.kind = op::param_grad;
        p.inputs[0] = dy;
        p.input_count = 1;
        p.origin = i;
        p.type = n.type;
        p.deferred_axis = deferred_axis_;
        emit(p, n.name.view(), "grad.");
        return;
      }
      case op::embedding:
        return accumulate(w, make(op::embedding_grad, {x, dy, w}, i));
      case op::position_embedding:
        accumulate(x, dy);
        return accumulate(w, make(op::position_embedding_grad, {dy, w}, i));
      case op::linear:
        accumulate(x, make(op::linear, {dy, w}, i, 0.0, !n.transpose_b));
        return accumulate(w, make(op::linear_weight_grad, {x, dy}, w, 0.0, n.transpose_b));
      case op::matmul:
        accumulate(x, make(op::matmul, {dy, make(op::transpose, {w}, w)}, i));
        return accumulate(w, make(op::matmul, {make(op::transpose, {x}, x), dy}, i));
      case op::add:
        accumulate(x, dy);
        return accumulate(w, dy);
      case op::mul:
        accumulate(x, make(op::mul, {dy, w}, i));
        return accumulate(w, make(op::mul, {dy, x}, i));
      case op::add_bias:
        accumulate(x, dy);
        return accumulate(w, make(op::bias_grad, {dy}, w));
      case op::gelu:
        return accumulate(x, make(op::gelu_grad, {x, dy}, i));
      case op::silu:
        return accumulate(x, make(op::silu_grad, {x, dy}, i));
      case op::relu:
        return accumulate(x, make(op::relu_grad, {x, dy}, i));
      case op::gelu_erf:
        return accumulate(x, make(op::gelu_erf_grad, {x, dy}, i));
      case op::quick_gelu:
        return accumulate(x, make(op::quick_gelu_grad, {x, dy}, i));
      case op::dropout: {  // dx = dy times the forward's mask and scale: dropout of dy, same seed
        const int d = make(op::dropout, {dy}, i, n.scalar);
        g_[d].seed = n.seed;
        return accumulate(x, d);
      }
      case op::permute: {  // the inverse permutation: dx's dimension from[k] is dy's dimension k
        node p;
        p.kind = op::permute;
        p.inputs[p.input_count++] = dy;
        p.type = n.type;
        for (int k = 0; k < static_cast<int>(max_rank) && n.permutation[k] >= 0; ++k)
          p.permutation[n.permutation[k]] = static_cast<std::int8_t>(k);
        return accumulate(x, emit(p, n.name.view()));
      }
      case op::patchify:
      case op::unfold1d: {  // the inverse layout, back to x's shape (fold1d sums overlapping windows)
        if (g_[x].kind == op::input) return;  // pixels and signals take no gradient: emit no step
        node fold;
        fold.kind = n.kind == op::patchify ? op::unpatchify : op::fold1d;
        fold.inputs[fold.input_count++] = dy;
        fold.type = n.type;
        fold.shape = g_[x].shape;
        fold.window = n.window;
        fold.stride = n.stride;
        fold.padding = n.padding;
        return accumulate(x, emit(fold, n.name.view()));
      }
      case op::layer_norm:
        accumulate(x, make(op::layer_norm_grad_x, {x, w, dy}, i, n.scalar));
        accumulate(w, make(op::layer_norm_grad_w, {x, dy}, w, n.scalar));
        return accumulate(n.inputs[2], make(op::bias_grad, {dy}, n.inputs[2]));
      case op::rms_norm:
        accumulate(x, make(op::rms_norm_grad_x, {x, w, dy}, i, n.scalar));
        return accumulate(w, make(op::rms_norm_grad_w, {x, dy}, w, n.scalar));
      case op::rope: {  // the same frequencies and factor: the transpose of the same rotation
        const int dx = make(op::rope_grad, {dy}, i);
        g_[dx].rope = n.rope;
        return accumulate(x, dx);
      }
      case op::split_heads:
        return accumulate(x, make(op::merge_heads, {dy}, i));
      case op::merge_heads:
        return accumulate(x, make(op::split_heads, {dy}, i));
      case op::attention: {
        const int k = n.inputs[1], v = n.inputs[2];
        // scalar: the scale; a mask is read after dy; each gradient keeps the forward's masking
        const auto gradient = [&](op kind, int forward) {
          const int d = n.input_count == 4 ? make(kind, {x, k, v, dy, n.inputs[3]}, forward, n.scalar)
                                           : make(kind, {x, k, v, dy}, forward, n.scalar);
          g_[d].masking = n.masking;
          return d;
        };
        accumulate(x, gradient(op::attention_grad_q, x));
        accumulate(k, gradient(op::attention_grad_k, k));
        return accumulate(v, gradient(op::attention_grad_v, v));
      }
      case op::softmax:
        return accumulate(x, make(op::softmax_grad, {i, dy}, i));
      case op::cross_entropy: {
        const int grad = make(op::cross_entropy_grad, {x, w, dy}, i);
        g_[grad].ignore_index = n.ignore_index;
        g_[grad].reduction = n.reduction;
        return accumulate(x, grad);
      }
      case op::redistribute:
        return accumulate(x, dy);
      case op::concat:
      case op::slice:
      case op::sum:
      case op::mean:
      case op::broadcast:
        return along_dimension_backward(i, n, dy);
      case op::custom:
        return custom_backward(i, n, dy);
      default:
        if (diagnostic* d = g_.report(i))
          *d << "autodiff met an op it does not differentiate (already lowered or already differentiated). "
                "apply autodiff once, to a forward graph, before insert_collectives";
        return;
    }
  }

  // The gradients along one dimension (ir/along_dimension.hpp): a concat's part k gets the slice of
  // dy where it lies (a slice naming the concat and the part); a slice's x gets dy placed in zeros
  // (slice_grad); a sum's or mean's x gets dy broadcast along the dimension they removed (divided
  // by its size for a mean), and a broadcast's x dy summed (or averaged) back.
  constexpr void along_dimension_backward(int i, const node& n, int dy) {
    node d;
    d.inputs[d.input_count++] = dy;
    d.type = n.type;
    d.along = n.along;
    d.slice_offset = n.slice_offset;
    d.slice_after = n.slice_after;
    const int x = n.inputs[0];
    switch (n.kind) {
      case op::concat:
        d.kind = op::slice;
        d.origin = i;
        for (int k = 0; k < n.input_count; ++k) {
          d.along.part = static_cast<std::int8_t>(k);
          d.shape = g_[n.inputs[k]].shape;
          accumulate(n.inputs[k], emit(d, g_[n.inputs[k]].name.view()));
        }
        return;
      case op::slice:
        d.kind = op::slice_grad;
        d.shape = g_[x].shape;
        break;
      case op::broadcast:
        d.kind = n.along.mean ? op::mean : op::sum;
        d.along.mean = false;
        break;
      default:  // sum, mean
        d.kind = op::broadcast;
        d.shape = g_[x].shape;
        d.along.mean = n.kind == op::mean;
        break;
    }
    accumulate(x, emit(d, n.name.view()));
  }

  // A custom op's backward (ir/custom_gradient.hpp): the DSL ops it adds join the current backward
  // region, named "d.<forward>.<op>"; then each input's gradient is accumulated.
  constexpr void custom_backward(int i, const node& n, int dy) {
    const custom_op& op = *n.custom;
    if (op.backward == nullptr) {
      if (diagnostic* d = g_.report(i))
        *d << "the loss depends on op '" << op.name << "', which has no backward. add static constexpr void "
           << "backward(shardgraph::custom_gradient&) to " << op.name << ", or keep the op out of the loss's path";
      return;
    }
    custom_gradient grad(b_, i, dy);
    name_buffer scope("d.");
    scope.append(n.name.view());
    b_.set_region(region_);
    b_.push_scope(scope.view());
    op.backward(grad);
    b_.pop_scope();
    for (int k = 0; k < n.input_count && g_.ok(); ++k) {
      if (!grad.needs_grad(k)) continue;
      const int gk = grad.input_grad(k);
      if (gk < 0 || !(g_[gk].shape == g_[n.inputs[k]].shape)) {
        if (diagnostic* d = g_.report(i))
          *d << op.name << "::backward sets " << (gk < 0 ? "no gradient" : "a gradient of another shape") << " for input "
             << k << ". call set_input_grad(" << k << ", ...) with a tensor of input " << k << "'s shape";
        return;
      }
      accumulate(n.inputs[k], gk);
    }
  }

  graph_builder& b_;
  graph_ref g_;
  int forward_count_;
  int grad_[Capacity]{};
  int region_ = -1;
  int deferred_axis_ = -1;
};

}  // namespace detail

// deferred_axis (ZeRO-2): parameter gradients are left Partial over that data-parallel axis; the
// optimizer reduce-scatters them, so each rank receives only the chunk it updates.
template <std::size_t Capacity>
constexpr basic_graph<Capacity> autodiff(const basic_graph<Capacity>& in, int deferred_axis = -1) {
  if (!in.ok()) return in;
  basic_graph_builder<Capacity> b(in);
  detail::gradient_builder<Capacity>(b, deferred_axis).run();
  return b.finish();
}

}  // namespace shardgraph::passes
