#pragma once
// The ComputeBackend concept and the kernel descriptor every backend receives (DESIGN §5).
// A backend owns memory (`buffer`), runs one kernel per descriptor, and moves blocks for the
// collectives. All sizes in a descriptor are LOCAL to the rank. Optional: `view(arena, byte_offset,
// dtype, numel)`, a buffer naming part of another's memory without owning it; with it bind places
// values that are not live at once in one arena (plan/memory_plan.hpp), without it each value
// gets its own allocation. Optional: `free_bytes()`, the bytes it can still allocate (host memory
// available, a GPU's free memory); bind checks its plan against it before allocating
// (runtime/memory_budget.hpp). `allocate` reports memory it cannot give as a shardgraph::error
// naming the bytes, never std::bad_alloc or an abort.
//
// kernel_call::dims by op (row-major, local):
//   embedding           {tokens, table_rows, cols, row_offset}  rows outside the table give 0
//   position_embedding  {batch, seq, cols}                      out = x + table[t]
//   linear              {m, k, n}                               out (m, n) = x (m, k) w
//   matmul              {batch, m, k, n}
//   add, mul, add_bias, gelu, silu, relu, gelu_erf (chains)  {numel}   see elementwise_step
//   quick_gelu (chains)  {numel}
//   gelu_grad, silu_grad, relu_grad, gelu_erf_grad  {numel}    (x, dy) -> dx = f'(x) dy
//   quick_gelu_grad      {numel}                                (x, dy) -> dx = f'(x) dy
//   layer_norm, rms_norm, softmax            {rows, cols}
//   rope, rope_grad     {batch, heads, seq, head_dim}          the table in kernel_call::rope
//   split_heads, merge_heads                 {batch, seq, heads, head_dim}
//   dropout             {d0, d1, d2, d3}                        x (d0, d1, d2, d3) local, padded in front
//                       with 1s; scalar p; the mask in kernel_call::dropout (compute/dropout_mask.hpp)
//   permute             {d0, d1, d2, d3, order}                 x (d0, d1, d2, d3), padded in front with 1s;
//                       out's dimension k is x's dimension permuted_from(order, k) (permute_order.hpp)
//   along one dimension (plan/along_dimension_dims.hpp), a tensor seen as (outer, n, inner):
//   concat              {outer, inner, n0, n1, n2, n3}          parts in[k] (outer, n_k, inner) one after
//                                                               another -> (outer, n0 + n1 + ..., inner)
//   slice               {outer, n, inner, start, size}          x (outer, n, inner) -> [:, start:start+size, :]
//   slice_grad          {outer, n, inner, start, size}          dy (outer, size, inner) -> (outer, n, inner),
//                                                               dy at [start, start + size), 0 elsewhere
//   sum, mean           {outer, n, inner, divisor}              x (outer, n, inner) -> (outer, inner), the
//                                                               sum over n / divisor
//   broadcast           {outer, n, inner, divisor}              x (outer, inner) -> (outer, n, inner) / divisor
//   patchify            {batch, channels, height, width, patch}  x (batch, channels, height, width) ->
//                       (batch, (height / patch) * (width / patch), channels * patch * patch): row
//                       i * (width / patch) + j is the patch at (i * patch, j * patch), features
//                       ordered (channel, row, column)
//   unpatchify          {batch, channels, height, width, patch}  its inverse: dy (batch, patches,
//                       features) -> dx (batch, channels, height, width)
//   unfold1d            {batch, channels, length, kernel, stride, padding}  x (batch, channels, length) ->
//                       (batch, length_out, channels * kernel), length_out = (length + 2 padding -
//                       kernel) / stride + 1: out[b][t][c * kernel + k] = x[b][c][t * stride - padding + k],
//                       0 outside x
//   fold1d              {batch, channels, length, kernel, stride, padding}  its transpose: dy (batch,
//                       length_out, channels * kernel) -> dx (batch, channels, length), each element the
//                       sum of the window entries that read it
//   attention           {batch, heads, kv_heads, seq, head_dim, seq_k}   scalar: the scores' scale,
//                                                                   0 for 1/sqrt(head_dim) (attention_scale)
//                       q (batch, heads, seq, head_dim); k, v (batch, kv_heads, seq_k, head_dim):
//                       seq_k != seq is a cross-attention (not causal); seq_k 0 stands for seq
//                       (attention_keys)
//                       masking: causal or not; with a mask, in[3] (in[4] in a gradient) is the
//                       mask (batch, seq) i64: padding (0 masks a key) or segment ids (a query sees
//                       the keys of its segment). A query that sees no key: output 0, gradients 0.
//   cached_attention    {batch, heads, kv_heads, seq, head_dim, block_tokens}   scalar as attention's
//                       q, k, v as a causal attention's; in[3] the KV cache (blocks, kv_heads,
//                       2 block_tokens, head_dim), written in place; in[4] kv_context (batch, table)
//                       i32: writes k, v at each row's positions, then attends over its cached
//                       tokens (passes/attach_kv_cache.hpp). rope and position_embedding with a
//                       last input kv_context rotate or embed at those positions.
//   cross_entropy       {rows, vocab, classes, divisor, ignore_index}
//                       out[0] = sum over rows whose target is not ignore_index of
//                       -log softmax(logits[row][0:classes])[target], / divisor (the targets counted in
//                       the whole step for a mean, 1 for a sum; 0 for a mean over none: NaN, as torch)
//   cross_entropy_grad  {rows, vocab, classes, divisor, ignore_index}   (logits, targets, dloss)
//                       out (rows, vocab) = (softmax(logits[row][0:classes]) - onehot(target)) * dloss[0] /
//                       divisor; 0 in ignored rows and in the padding columns [classes, vocab). A target
//                       outside [0, classes) that is not ignore_index is an error.
//   The vocabulary-parallel cross-entropy (passes/vocab_parallel_loss.hpp; a rank holds the logits'
//   columns [offset, offset + vocab) of the whole vocabulary's `classes`, one slice of `ranks`):
//   vocab_statistics    {rows, vocab, classes, offset, ignore_index, ranks}  (logits, targets) -> (rows, 2)
//   vocab_exp_sum       {rows, vocab, classes, offset, ignore_index, ranks}  (logits, stats) -> (rows)
//   vocab_log_sum_exp   {rows}                                               (stats, sums) -> lse (rows)
//   cross_entropy       as above, given (logits, targets, lse, stats): the counted rows' lse - stats[row][0]
//   cross_entropy_grad  as above and offset in dims[5], given (logits, targets, dloss, lse):
//                       (exp(x - lse) - onehot(target)) * dloss[0] / divisor on the slice's classes
//   (formulas: backends/cpu/include/shardgraph/cpu/vocab_parallel_loss.hpp)
//   ones                {numel}                                 out = scalar (the loss scale), 1 if scalar is 0
// kernel_call::type is the output's dtype. Under mixed precision inputs may be bf16 or f16 while the
// output is f32 (the loss), and the reverse (the loss gradient's consumers); a kernel computes in
// f32 whenever any of its buffers is 16-bit.
#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>

#include "shardgraph/compute/dropout_mask.hpp"
#include "shardgraph/compute/fused_kinds.hpp"
#include "shardgraph/compute/rope_frequencies.hpp"
#include "shardgraph/core/dtype.hpp"
#include "shardgraph/ir/node.hpp"

namespace shardgraph::compute {

inline constexpr int max_chain = 8;

// One op of an elementwise chain: value = kind(value, operands[operand][i % period]).
// The chain starts from operands[0]; unary ops use no operand; period 0 means same size as out.
struct elementwise_step {
  op kind = op::add;
  int operand = -1;
  std::int64_t period = 0;
};

// What a linear's product does after its bias (kernel_call::epilogue, fused::linear_epilogue);
// kernel_call::side is the other buffer it touches. A layer_norm_grad_x or rms_norm_grad_x call may
// carry `add` too (fused::norm_grad_add: the residual stream's gradient sum), and an embedding_grad
// call (fused::embedding_grad_add: a tied table's gradient, the output layer's weight gradient plus
// the lookup's). Each stands for the elementwise step after the call (a GPU's GEMM does it in its
// epilogue):
//   gelu       out = gelu(x w + b); side, when set, receives x w + b (gelu_grad's input, kept for the
//              backward)
//   gelu_grad  out = (x w) * gelu'(side): side is gelu's input (the backward of a gelu after a linear)
//   add        out = x w + b + side (a residual, or a gradient summed from two branches)
enum class product_epilogue : std::uint8_t { none, gelu, gelu_grad, add };

// One call. The fields past `rope` are set only in a call of a fused kind (compute/fused_kinds.hpp
// names each); a backend receives only the fused kinds its traits declare it runs, the core lowers
// the others into the calls they stand for (compute/lower_fused.hpp).
template <class Buffer>
struct kernel_call {
  op kind = op::add;
  dtype type = dtype::f32;
  Buffer* out = nullptr;
  const Buffer* in[max_inputs]{};
  std::int64_t dims[6]{};
  double scalar = 0.0;
  bool transpose_b = false;
  // attention and its gradients: causal or not, and what in[attention_mask_input(gradient)] holds
  // (ir/attention_masking.hpp).
  attention_masking masking;
  // rope and rope_grad only: the inverse frequencies and the cos/sin factor, planned at bind from
  // the node's rope_scaling and the local sizes (runtime/rope_plan.hpp); rope_grad's are its rope's.
  const rope_frequencies* rope = nullptr;
  // dropout only: the mask's seed, the run's step and the block's place in the whole tensor.
  dropout_mask dropout;
  // fused::linear_bias: out = x w + bias (n, broadcast over rows).
  const Buffer* bias = nullptr;
  // fused::weight_grad_with_bias (linear_weight_grad) and norm_weight_grad_with_bias
  // (layer_norm_grad_w, or a norm_backward): also the bias gradient, the column sums of dy = in[1]
  // ((n), as a bias_grad call would write them).
  Buffer* bias_grad = nullptr;
  // fused::linear_epilogue, norm_grad_add, embedding_grad_add: see product_epilogue.
  product_epilogue epilogue = product_epilogue::none;
  Buffer* side = nullptr;
  // fused::attention_token_major, attention and its gradients: q, k, v, dout and the result are laid
  // out (batch, seq, heads, head_dim) (as before split_heads and after merge_heads, whose steps the
  // call stands for) instead of (batch, heads, seq, head_dim); dims are the same.
  bool token_major = false;
  // fused::attention_saved, attention: the result stays unchanged until its gradients' calls, which
  // receive it as `side`; the call writes each row's log-sum-exp of the scaled scores into `saved`
  // ((batch, heads, seq) f32, in the form the backend's backward reads), which the gradients' calls
  // receive as `saved`. A backend may leave `saved` unwritten when its gradients' calls of the same
  // operands would not read it (the backward then computes the forward again); the plan allocates
  // it and keeps it alive.
  // fused::cross_entropy_saved, cross_entropy: the logits stay unchanged until the cross_entropy_grad
  // call of the same logits and targets; the call writes each row's log-sum-exp of the logits into
  // `saved` ((rows), f64 for f64 logits, else f32), which that gradient's call receives as `saved`
  // (with `side`, the loss).
  bool output_kept = false;
  Buffer* saved = nullptr;
  // fused::loss_with_gradient, cross_entropy: also the logits' gradient, what the cross_entropy_grad
  // call of the same logits and targets would write for a loss gradient of 1 (the backward's seed).
  // It may be the logits' own memory (the memory plan puts it there when nothing reads the logits
  // later).
  Buffer* logits_grad = nullptr;
  // fused::attention_backward, attention_grad_q: also dk and dv, the results the attention_grad_k
  // and _v calls of the same operands would write.
  Buffer* key_grad = nullptr;
  Buffer* value_grad = nullptr;
  // fused::norm_backward, layer_norm_grad_x and rms_norm_grad_x: also the weight gradient, what the
  // layer_norm_grad_w (rms_norm_grad_w) call of the same x = in[0] and dy = in[2] would write, and
  // with it bias_grad when that call carried one.
  Buffer* weight_grad = nullptr;
  // fused::batched_products, linear and linear_weight_grad: `batch` products of the same sizes in
  // one call (q, k and v of one x). Product b reads in[0] (shared) and in[1] + b * batch_strides[0]
  // elements, writes out + b * batch_strides[1], and reads bias (writes bias_grad) +
  // b * batch_strides[2]; the buffers given are product 0's, and the others' memory lies past them at
  // these strides. A backend running it declares `static const void* address(const buffer&)`, by
  // which the core finds the strides.
  std::int64_t batch = 1;
  std::int64_t batch_strides[3]{};

  elementwise_step chain[max_chain]{};
  int chain_length = 0;
  const Buffer* operands[max_chain + 1]{};
  int operand_count = 0;
};

// The fused kinds call c carries.
template <class Buffer>
constexpr fused_set fused_kinds_of(const kernel_call<Buffer>& c) {
  return fused_kinds_of(c, c.kind, [](const Buffer* b) { return b != nullptr; }, c.batch > 1);
}

// The scale of an attention call's scores (and its gradients'): kernel_call::scalar, where 0 stands
// for 1 / sqrt(head_dim).
inline double attention_scale(double scalar, std::int64_t head_dim) {
  return scalar != 0.0 ? scalar : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

// The keys' length of an attention call (or its gradient's): dims[5], where 0 stands for seq (dims[3]).
inline std::int64_t attention_keys(const std::int64_t* dims) { return dims[5] != 0 ? dims[5] : dims[3]; }

// Block moves for collectives, on elements of `element_bytes` bytes. A tensor (outer, parts*mid, inner)
// split along its middle dimension into `parts` blocks:
//   deinterleave: (outer, parts*mid, inner) -> [parts][outer][mid][inner]
//   interleave:   [parts][outer][mid][inner] -> (outer, parts*mid, inner)
//   slice:        (outer, parts*mid, inner) -> block `index` (outer, mid, inner)
struct block_layout {
  std::int64_t parts = 1, outer = 1, mid = 1, inner = 1;
  std::int64_t element_bytes = 4;
};

template <class B>
concept ComputeBackend = requires(B& b, typename B::buffer& buf, const typename B::buffer& cbuf,
                                  const kernel_call<typename B::buffer>& call, void* p, const void* cp,
                                  std::int64_t n, dtype t, block_layout layout, std::int64_t index) {
  { b.allocate(t, n) } -> std::same_as<typename B::buffer>;
  b.upload(buf, cp);    // host -> buffer (the whole buffer)
  b.download(cbuf, p);  // buffer -> host
  b.copy(cbuf, buf);    // same size
  b.run(call);
  { b.data(buf) } -> std::same_as<void*>;  // the memory communicators read and write
  b.deinterleave(cbuf, buf, layout);
  b.interleave(cbuf, buf, layout);
  b.slice(cbuf, buf, layout, index);
};

}  // namespace shardgraph::compute

namespace shardgraph::compute {

// What training needs beyond running the program: the optimizer's elementwise work on parameter,
// gradient and state buffers (same size and dtype), done where the buffers live.
struct adamw_arguments {
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0;
  std::int64_t step = 1;  // 1-based, for the bias corrections
};

// One parameter's update for a backend that updates many in one call, `adamw_many(span of these)`
// (optional: the trainer calls adamw() and convert() per parameter otherwise): param, m and v as
// adamw() takes them, and, when `rounded` is set, param converted into it afterwards (the model's
// 16-bit weights from their f32 master). grad has param's size but may be of another floating
// dtype (a bf16 gradient of an f32 master); each element is widened to param's dtype and, when
// grad_factor is not 1, multiplied by it and rounded to param's dtype, exactly as scale() would
// round it (the clipping coefficient), before the update reads it.
template <class Buffer>
struct adamw_update {
  Buffer* param = nullptr;
  const Buffer* grad = nullptr;
  Buffer* m = nullptr;
  Buffer* v = nullptr;
  Buffer* rounded = nullptr;
  adamw_arguments arguments;
  double grad_factor = 1;
};

template <class B>
concept TrainingBackend = ComputeBackend<B> && requires(B& b, typename B::buffer& buf, const typename B::buffer& cbuf,
                                                         double factor, const adamw_arguments& a,
                                                         std::int64_t offset) {
  { b.sum_of_squares(cbuf) } -> std::convertible_to<double>;  // accumulated in double
  b.scale(buf, factor);                                       // buf *= factor
  b.add_scaled(cbuf, buf, factor);                            // buf += factor * cbuf (dtypes may differ)
  b.convert(cbuf, buf);                                       // buf = cbuf rounded to buf's dtype
  b.fill_zero(buf);
  b.adamw(buf, cbuf, buf, buf, a);                            // param, grad, m, v (torch.optim.AdamW)
  b.copy_range(cbuf, offset, buf, offset, offset);            // elements [from, from + count) -> [to, ...)
};

}  // namespace shardgraph::compute
