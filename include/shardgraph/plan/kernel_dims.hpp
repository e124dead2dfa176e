#pragma once
// kernel_dims: the dims of node i's kernel call on one rank (compute/compute_backend.hpp lists
// them per op), from its program, its local layout and the run's sizes.
//
//   std::array<std::int64_t, 6> d = plan::kernel_dims(program, layout, sizes, i);
//   // linear of x (4, 8, 16) by w (16, 32) -> {32, 16, 32}
//
// A mean loss's divisor (cross_entropy dims[3]) is every row of the logits here; the run replaces
// it with its count of targets (bound_call::divisor_entry).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardgraph/compute/permute_order.hpp"
#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/plan/along_dimension_dims.hpp"
#include "shardgraph/plan/dropout_block.hpp"
#include "shardgraph/program/program.hpp"
#include "shardgraph/runtime/local_layout.hpp"

namespace shardgraph::plan {

using kernel_dim_array = std::array<std::int64_t, 6>;

namespace detail {

// The product of v[from, to).
inline std::int64_t dims_product(const std::vector<std::int64_t>& v, std::size_t from, std::size_t to) {
  return checked_product(std::span<const std::int64_t>(v).subspan(from, to - from), "executor: kernel dims");
}
// {rows, last}: the rows of x's last dimension, and that dimension.
inline kernel_dim_array rows_and_columns(const std::vector<std::int64_t>& x) {
  return {dims_product(x, 0, x.size() - 1), x.back()};
}
inline kernel_dim_array four(const std::vector<std::int64_t>& x) { return {x[0], x[1], x[2], x[3]}; }

// embedding, position_embedding, their gradients: {tokens, table_rows, cols, row_offset} and
// {batch, seq, cols(, table_rows)}.
inline kernel_dim_array embedding_dims(const node& n, const local_layout& layout, int i) {
  const std::vector<std::int64_t>& x = layout.of(n.inputs[0]).local;
  switch (n.kind) {
    case op::embedding: {
      const local_dims& table = layout.of(n.inputs[1]);
      return {dims_product(x, 0, x.size()), table.local[0], table.local[1], table.offset[0]};
    }
    case op::embedding_grad: {
      const local_dims& table = layout.of(i);
      return {dims_product(x, 0, x.size()), table.local[0], table.local[1], table.offset[0]};
    }
    case op::position_embedding:
      return {x[0], x[1], x[2]};
    default:  // position_embedding_grad
      return {x[0], x[1], x[2], layout.of(i).local[0]};
  }
}

// The products and their weight gradients: {m, k, n}; matmul {batch, m, k, n}; transpose
// {batch, rows, cols}.
inline kernel_dim_array product_dims(const node& n, const local_layout& layout, int i) {
  const std::vector<std::int64_t>& x = layout.of(n.inputs[0]).local;
  const std::vector<std::int64_t>& out = layout.of(i).local;
  switch (n.kind) {
    case op::linear:
      return {dims_product(x, 0, x.size() - 1), x.back(), out.back()};
    case op::matmul:
      return {dims_product(x, 0, x.size() - 2), x[x.size() - 2], x.back(), out.back()};
    case op::transpose:
      return {dims_product(x, 0, x.size() - 2), x[x.size() - 2], x.back()};
    default: {  // linear_weight_grad
      const std::vector<std::int64_t>& dy = layout.of(n.inputs[1]).local;
      return {dims_product(x, 0, x.size() - 1), x.back(), dy.back()};
    }
  }
}

// permute: x's local dims padded in front with 1s to rank 4, and the order (compute/permute_order.hpp)
// of the permutation shifted by that padding.
inline kernel_dim_array permute_dims(const node& n, const std::vector<std::int64_t>& x) {
  const int pad = compute::permute_rank - static_cast<int>(x.size());
  kernel_dim_array d{1, 1, 1, 1, 0, 0};
  std::array<int, compute::permute_rank> from{};
  for (int k = 0; k < compute::permute_rank; ++k) {
    if (k >= pad) d[static_cast<std::size_t>(k)] = x[static_cast<std::size_t>(k - pad)];
    from[static_cast<std::size_t>(k)] = k < pad ? k : n.permutation[k - pad] + pad;
  }
  d[4] = compute::permute_order(from);
  return d;
}

// The convolutions' layouts, from the image's or signal's local dims (the input of patchify and
// unfold1d, the result of their gradients): patchify, unpatchify {batch, channels, height, width,
// patch}; unfold1d, fold1d {batch, channels, length, kernel, stride, padding}.
inline kernel_dim_array window_dims(const node& n, const local_layout& layout, const model_sizes& sizes,
                                    int i) {
  const bool forward = n.kind == op::patchify || n.kind == op::unfold1d;
  const std::vector<std::int64_t>& x = layout.of(forward ? n.inputs[0] : i).local;
  const std::int64_t window = sizes.get(n.window);
  if (x.size() == 4) return {x[0], x[1], x[2], x[3], window};
  return {x[0], x[1], x[2], window, n.stride, n.padding};
}

// Attention and its gradients: {batch, heads, kv_heads, seq, head_dim}.
inline kernel_dim_array attention_dims(const node& n, const local_layout& layout) {
  const std::vector<std::int64_t>& x = layout.of(n.inputs[0]).local;
  const std::vector<std::int64_t>& k = layout.of(n.inputs[1]).local;
  return {x[0], x[1], k[1], x[2], x[3], k[2]};
}

}  // namespace detail

// A cross_entropy's or cross_entropy_grad's dims: {rows, vocab, classes, divisor, ignore_index},
// the divisor 1 for a sum and every row of the logits for a mean; vocab is this rank's columns of the
// logits (all of them, unless the loss is vocabulary parallel), classes those of the whole vocabulary.
inline kernel_dim_array loss_dims(const program_view& p, const local_layout& layout, const model_sizes& sizes, int i) {
  const node& n = p.nodes[i];
  const local_dims& logits = layout.of(n.inputs[0]);
  const shape& s = p.nodes[n.inputs[0]].shape;
  const extent vocab = s[s.rank() - 1];
  const std::int64_t rows = detail::dims_product(logits.local, 0, 2);
  const std::int64_t divisor =
      n.reduction == loss_reduction::sum ? 1 : detail::dims_product(logits.global, 0, 2);
  return {rows, logits.local[2], sizes.classes_of(vocab, logits.global[2]), divisor, n.ignore_index};
}

// vocab_statistics' and vocab_exp_sum's dims (passes/vocab_parallel_loss.hpp), from the logits'
// slice on this rank: {rows, columns, classes, column_offset, ignore_index, ranks} (a rank holds
// the logits' columns [column_offset, column_offset + columns) of the vocabulary, of which those
// below `classes` are classes; `ranks` share it). vocab_log_sum_exp takes {rows}, the loss
// loss_dims, and its gradient loss_dims with classes and column_offset in dims[2] and dims[5].
inline kernel_dim_array vocab_parallel_dims(const program_view& p, const local_layout& layout, const model_sizes& sizes,
                                            int i) {
  const node& n = p.nodes[i];
  const local_dims& logits = layout.of(n.inputs[0]);
  const shape& s = p.nodes[n.inputs[0]].shape;
  const std::int64_t rows = detail::dims_product(logits.local, 0, 2);
  const std::int64_t classes = sizes.classes_of(s[s.rank() - 1], logits.global[2]);
  return {rows, logits.local[2], classes, logits.offset[2], n.ignore_index, logits.global[2] / logits.local[2]};
}

// Node i's kernel dims. Fails for an op that has no kernel (a bug in lower()).
inline kernel_dim_array kernel_dims(const program_view& p, const local_layout& layout, const model_sizes& sizes, int i) {
  const node& n = p.nodes[i];
  const std::vector<std::int64_t>& x = layout.of(n.inputs[0]).local;
  if (is_along_dimension(n.kind)) return detail::along_dimension_dims(p, layout, sizes, i);
  switch (n.kind) {
    case op::embedding:
    case op::embedding_grad:
    case op::position_embedding:
    case op::position_embedding_grad:
      return detail::embedding_dims(n, layout, i);
    case op::linear:
    case op::matmul:
    case op::transpose:
    case op::linear_weight_grad:
      return detail::product_dims(n, layout, i);
    case op::layer_norm:
    case op::rms_norm:
    case op::softmax:
    case op::bias_grad:
    case op::layer_norm_grad_x:
    case op::layer_norm_grad_w:
    case op::rms_norm_grad_x:
    case op::rms_norm_grad_w:
    case op::softmax_grad:
      return detail::rows_and_columns(x);
    case op::rope:
    case op::rope_grad:
      return detail::four(x);
    case op::split_heads: {
      const std::vector<std::int64_t>& out = layout.of(i).local;
      return {out[0], out[2], out[1], out[3]};
    }
    case op::merge_heads:
      return {x[0], x[2], x[1], x[3]};
    case op::attention:
    case op::attention_grad_q:
    case op::attention_grad_k:
    case op::attention_grad_v:
      return detail::attention_dims(n, layout);
    case op::cached_attention: {  // {batch, heads, kv_heads, seq, head_dim, block_tokens}
      kernel_dim_array d = detail::attention_dims(n, layout);
      d[5] = layout.of(n.inputs[3]).local[2] / 2;  // the cache's block rows: keys, then values
      return d;
    }
    case op::cross_entropy:
      return loss_dims(p, layout, sizes, i);
    case op::cross_entropy_grad: {
      kernel_dim_array d = loss_dims(p, layout, sizes, i);
      d[5] = layout.of(n.inputs[0]).offset[2];  // the first column of the logits' slice (vocabulary parallel)
      return d;
    }
    case op::vocab_statistics:
    case op::vocab_exp_sum:
      return vocab_parallel_dims(p, layout, sizes, i);
    case op::vocab_log_sum_exp:
      return {layout.of(i).numel()};
    case op::gelu_grad:
    case op::silu_grad:
    case op::relu_grad:
    case op::gelu_erf_grad:
    case op::quick_gelu_grad:
    case op::ones:
    case op::custom:  // its kernel reads every local shape (bound_call::custom_shapes)
      return {layout.of(i).numel()};
    case op::permute:
      return detail::permute_dims(n, x);
    case op::patchify:
    case op::unpatchify:
    case op::unfold1d:
    case op::fold1d:
      return detail::window_dims(n, layout, sizes, i);
    case op::dropout:
      return dropout_dims(layout.of(i));
    default:
      fail("executor: " + std::string(op_name(n)) + " '" + std::string(n.name.view()) + "'",
           "this op has no kernel", "this is a bug in lower(); please report it");
  }
}

}  // namespace shardgraph::plan
