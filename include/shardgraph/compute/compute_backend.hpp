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
//   add, mul, add_bias, gelu, silu (chains)  {numel}           see elementwise_step
//   layer_norm, rms_norm, softmax            {rows, cols}
//   rope, rope_grad     {batch, heads, seq, head_dim}          the table in kernel_call::rope
//   split_heads, merge_heads                 {batch, seq, heads, head_dim}
//   attention           {batch, heads, kv_heads, seq, head_dim}     scalar: the scores' scale,
//                                                                   0 for 1/sqrt(head_dim) (attention_scale)
//   cross_entropy       {rows, vocab, classes, divisor, ignore_index}
//                       out[0] = sum over rows whose target is not ignore_index of
//                       -log softmax(logits[row][0:classes])[target], / divisor (the targets counted in
//                       the whole step for a mean, 1 for a sum; 0 for a mean over none: NaN, as torch)
//   cross_entropy_grad  {rows, vocab, classes, divisor, ignore_index}   (logits, targets, dloss)
//                       out (rows, vocab) = (softmax(logits[row][0:classes]) - onehot(target)) * dloss[0] /
//                       divisor; 0 in ignored rows and in the padding columns [classes, vocab). A target
//                       outside [0, classes) that is not ignore_index is an error.
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

// What a linear's product does after its bias (kernel_call::epilogue), for a backend declaring
// `static constexpr bool linear_epilogues = true`; kernel_call::side is the other buffer it touches.
// A layer_norm_grad_x or rms_norm_grad_x call may carry `add` too, for a backend declaring
// `static constexpr bool norm_grad_add_epilogue = true` (the residual stream's gradient sum), and
// an embedding_grad call for one declaring `static constexpr bool embedding_grad_add_epilogue =
// true` (a tied table's gradient: the output layer's weight gradient plus the lookup's).
// Each stands for the elementwise step the executor then skips (a GPU's GEMM does it in its epilogue):
//   gelu       out = gelu(x w + b); side, when set, receives x w + b (gelu_grad's input, kept for the
//              backward)
//   gelu_grad  out = (x w) * gelu'(side): side is gelu's input (the backward of a gelu after a linear)
//   add        out = x w + b + side (a residual, or a gradient summed from two branches)
enum class product_epilogue : std::uint8_t { none, gelu, gelu_grad, add };

template <class Buffer>
struct kernel_call {
  op kind = op::add;
  dtype type = dtype::f32;
  Buffer* out = nullptr;
  const Buffer* in[max_inputs]{};
  std::int64_t dims[6]{};
  double scalar = 0.0;
  bool transpose_b = false;
  // rope and rope_grad only: the inverse frequencies and the cos/sin factor, planned at bind from
  // the node's rope_scaling and the local sizes (runtime/rope_plan.hpp); rope_grad's are its rope's.
  const rope_frequencies* rope = nullptr;
  // linear only: out = x w + bias (n, broadcast over rows), set when the backend declares
  // `static constexpr bool linear_bias_epilogue = true` (a GEMM that adds it in its epilogue).
  const Buffer* bias = nullptr;
  // linear_weight_grad and layer_norm_grad_w only: also the bias gradient, the column sums of
  // dy = in[1] ((n), as a bias_grad call would write them), set when the backend declares
  // `static constexpr bool linear_bias_grad_epilogue = true` (a GEMM that sums them in its epilogue)
  // or, for the norm's, `norm_bias_grad_fused = true` (one pass over dy for both sums).
  Buffer* bias_grad = nullptr;
  // linear (and layer_norm_grad_x, rms_norm_grad_x: add): see product_epilogue.
  product_epilogue epilogue = product_epilogue::none;
  Buffer* side = nullptr;
  // attention and its gradients only, set when the backend declares
  // `static constexpr bool attention_token_major = true`: q, k, v, dout and the result are laid out
  // (batch, seq, heads, head_dim) (as before split_heads and after merge_heads, whose steps the
  // executor then skips) instead of (batch, heads, seq, head_dim); dims are the same.
  bool token_major = false;
  // attention only, set when the backend declares `static constexpr bool attention_output_reuse =
  // true`: the result stays unchanged until its gradients' calls, which receive it as `side` (the
  // backend may keep what its backward needs with it: flash attention keeps the rows' log-sum-exp).
  // attention_grad_q, _k, _v: side, when set, is that result, in the layout of the output gradient.
  // cross_entropy, set when the backend declares `static constexpr bool cross_entropy_statistics_kept
  // = true`: the logits stay unchanged until the cross_entropy_grad call of the same logits and
  // targets, whose side is then this call's loss (the backend may keep each row's log-sum-exp).
  bool output_kept = false;
  // cross_entropy only: also the logits' gradient, what the cross_entropy_grad call of the same
  // logits and targets would write for a loss gradient of 1 (the backward's seed), set when the
  // backend declares `static constexpr bool cross_entropy_gradient_with_loss = true` (one kernel
  // reads each row once for both). It may be the logits' own memory (the memory plan puts it there
  // when nothing reads the logits later); the gradient's step is then skipped.
  Buffer* logits_grad = nullptr;
  // attention_grad_q only: also dk and dv, the results the attention_grad_k and _v calls of the same
  // operands would write, set when the backend declares `static constexpr bool
  // attention_gradients_together = true` (one backward makes all three).
  Buffer* key_grad = nullptr;
  Buffer* value_grad = nullptr;
  // layer_norm_grad_x and rms_norm_grad_x only: also the weight gradient, what the layer_norm_grad_w
  // (rms_norm_grad_w) call of the same x = in[0] and dy = in[2] would write, and with it bias_grad
  // when that call carried one; set when the backend declares `static constexpr bool
  // norm_gradients_together = true` (one pass over x and dy for the three).
  Buffer* weight_grad = nullptr;
  // linear and linear_weight_grad only, set when the backend declares `static constexpr bool
  // products_batched = true` (and `static const void* address(const buffer&)`, by which the
  // executor finds the strides): `batch` products of the same sizes in one call (q, k and v of one
  // x). Product b reads in[0] (shared) and in[1] + b * batch_strides[0] elements, writes out +
  // b * batch_strides[1], and reads bias (writes bias_grad) + b * batch_strides[2]; the buffers
  // given are product 0's, and the others' memory lies past them at these strides.
  std::int64_t batch = 1;
  std::int64_t batch_strides[3]{};

  elementwise_step chain[max_chain]{};
  int chain_length = 0;
  const Buffer* operands[max_chain + 1]{};
  int operand_count = 0;
};

// The scale of an attention call's scores (and its gradients'): kernel_call::scalar, where 0 stands
// for 1 / sqrt(head_dim).
inline double attention_scale(double scalar, std::int64_t head_dim) {
  return scalar != 0.0 ? scalar : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

// Block moves for collectives, on elements of `element_bytes` bytes. A tensor (outer, parts*mid, inner)
// split along its middle dimension into `parts` blocks:
//   deinterleave: (outer, parts*mid, inner) -> [parts][outer][mid][inner]
//   interleave:   [parts][outer][mid][inner] -> (outer, parts*mid, inner)
//   slice:        (outer, parts*mid, inner) -> block `index` (outer, mid, inner)
struct block_layout {
  std::int64_t parts = 1, outer = 1, mid = 1, inner = 1;
  std::int64_t element_bytes = 4;
};

// A linear_weight_grad or layer_norm_grad_w call carrying bias_grad, as the two calls it stands
// for: the weight gradient alone, and the bias_grad call (dy's column sums over its rows), for a
// backend that runs them apart.
template <class Buffer>
struct weight_and_bias_grad {
  kernel_call<Buffer> product, bias_grad;
};
template <class Buffer>
weight_and_bias_grad<Buffer> split_bias_grad(const kernel_call<Buffer>& c) {
  weight_and_bias_grad<Buffer> apart{.product = c, .bias_grad = {}};
  apart.product.bias_grad = nullptr;
  apart.bias_grad.kind = op::bias_grad;
  apart.bias_grad.type = c.bias_grad->type();
  apart.bias_grad.out = c.bias_grad;
  apart.bias_grad.in[0] = c.in[1];      // dy (rows, n) of both
  apart.bias_grad.dims[0] = c.dims[0];  // rows
  // n: a product's dims are (rows, k, n), a norm's (rows, n)
  apart.bias_grad.dims[1] = c.kind == op::layer_norm_grad_w ? c.dims[1] : c.dims[2];
  return apart;
}

// Product b of a batched call (kernel_call::batch) as a call of its own, for a backend that runs
// them one at a time. Buffer::at_offset(bytes) is a buffer of the same dtype and size that many
// bytes past the buffer's start; `views` holds those made while the call runs.
template <class Buffer>
kernel_call<Buffer> batch_member(const kernel_call<Buffer>& c, std::int64_t b, std::array<Buffer, 3>& views) {
  kernel_call<Buffer> m = c;
  m.batch = 1;
  const auto moved = [&](const Buffer& from, int k) {
    views[static_cast<std::size_t>(k)] =
        from.at_offset(static_cast<std::size_t>(b * c.batch_strides[k]) * dtype_size(from.type()));
    return &views[static_cast<std::size_t>(k)];
  };
  m.in[1] = moved(*c.in[1], 0);
  m.out = moved(*c.out, 1);
  if (c.bias != nullptr) m.bias = moved(*c.bias, 2);
  if (c.bias_grad != nullptr) m.bias_grad = moved(*c.bias_grad, 2);
  return m;
}

// An attention_grad_q call carrying key_grad and value_grad, as the three calls it stands for: dq,
// dk and dv of the same operands, for a backend that runs them apart.
template <class Buffer>
std::array<kernel_call<Buffer>, 3> split_attention_gradients(const kernel_call<Buffer>& c) {
  std::array<kernel_call<Buffer>, 3> apart{c, c, c};
  for (kernel_call<Buffer>& a : apart) a.key_grad = a.value_grad = nullptr;
  apart[1].kind = op::attention_grad_k;
  apart[1].out = c.key_grad;
  apart[2].kind = op::attention_grad_v;
  apart[2].out = c.value_grad;
  return apart;
}

// A cross_entropy call carrying logits_grad, as the two calls it stands for, to run in this order
// (logits_grad may be the logits' memory): the loss alone, then the cross_entropy_grad of the same
// logits and targets writing logits_grad, whose loss gradient is `one` (one element of the loss's
// dtype holding 1).
template <class Buffer>
struct loss_and_logits_grad {
  kernel_call<Buffer> loss, gradient;
};
template <class Buffer>
loss_and_logits_grad<Buffer> split_cross_entropy_gradient(const kernel_call<Buffer>& c, const Buffer& one) {
  loss_and_logits_grad<Buffer> apart{.loss = c, .gradient = c};
  apart.loss.logits_grad = nullptr;
  kernel_call<Buffer>& g = apart.gradient;
  g.logits_grad = nullptr;
  g.output_kept = false;
  g.kind = op::cross_entropy_grad;
  g.type = c.logits_grad->type();
  g.out = c.logits_grad;
  g.in[2] = &one;  // dims: (rows, vocab, global rows), as the loss's
  return apart;
}

// A layer_norm_grad_x or rms_norm_grad_x call carrying weight_grad (and bias_grad), as the two calls
// it stands for: the input gradient alone, and the weight gradient of the same x and dy (with the
// bias gradient, as split_bias_grad splits it further), for a backend that runs them apart.
template <class Buffer>
struct input_and_weight_grad {
  kernel_call<Buffer> input_grad, weight_grad;
};
template <class Buffer>
input_and_weight_grad<Buffer> split_norm_gradients(const kernel_call<Buffer>& c) {
  input_and_weight_grad<Buffer> apart{.input_grad = c, .weight_grad = {}};
  apart.input_grad.weight_grad = apart.input_grad.bias_grad = nullptr;
  kernel_call<Buffer>& w = apart.weight_grad;
  w.kind = c.kind == op::layer_norm_grad_x ? op::layer_norm_grad_w : op::rms_norm_grad_w;
  w.type = c.weight_grad->type();
  w.out = c.weight_grad;
  w.bias_grad = c.bias_grad;
  w.in[0] = c.in[0];      // x
  w.in[1] = c.in[2];      // dy
  w.dims[0] = c.dims[0];  // rows
  w.dims[1] = c.dims[1];  // cols
  w.scalar = c.scalar;    // eps
  return apart;
}

// A linear call with an epilogue (product_epilogue), as the two calls it stands for: the product
// (with its bias) into out, or into side for gelu when side is set, then the elementwise call on
// out (in place), for a backend that runs them apart. The rounding is that of the two steps.
template <class Buffer>
struct product_and_elementwise {
  kernel_call<Buffer> product, elementwise;
};
template <class Buffer>
product_and_elementwise<Buffer> split_epilogue(const kernel_call<Buffer>& c) {
  product_and_elementwise<Buffer> apart{.product = c, .elementwise = {}};
  apart.product.epilogue = product_epilogue::none;
  apart.product.side = nullptr;
  kernel_call<Buffer>& e = apart.elementwise;
  e.type = c.type;
  e.out = c.out;
  e.dims[0] = c.out->numel();
  switch (c.epilogue) {
    case product_epilogue::gelu:
      if (c.side != nullptr) apart.product.out = c.side;
      e.kind = op::gelu;
      e.operands[e.operand_count++] = apart.product.out;
      e.chain[e.chain_length++] = {op::gelu, -1, 0};
      break;
    case product_epilogue::add:
      e.kind = op::add;
      e.operands[e.operand_count++] = c.out;
      e.operands[e.operand_count++] = c.side;
      e.chain[e.chain_length++] = {op::add, 1, 0};
      break;
    case product_epilogue::gelu_grad:  // gelu_grad's inputs: x, dy
      e.kind = op::gelu_grad;
      e.in[0] = c.side;
      e.in[1] = c.out;
      break;
    case product_epilogue::none:
      break;
  }
  return apart;
}

// A token-major attention call (kernel_call::token_major) run as the split_heads steps, the
// head-major call and the merge_heads step it stands for would run it, for a backend whose kernel
// takes head-major operands only: the same values, rounded the same. `copy_of(like)` gives a
// buffer of like's dtype and size for a head-major copy (inputs in order, then the result).
template <class Buffer, class Run, class CopyOf>
void run_token_major_apart(const kernel_call<Buffer>& call, Run&& run, CopyOf&& copy_of) {
  const std::int64_t* d = call.dims;  // batch, heads, kv_heads, seq, head_dim
  const int inputs = call.kind == op::attention ? 3 : 4;
  const auto heads_of = [&](int k) { return k == 1 || k == 2 ? d[2] : d[1]; };  // k, v: kv heads
  const std::int64_t out_heads =
      call.kind == op::attention_grad_k || call.kind == op::attention_grad_v ? d[2] : d[1];
  const auto permute = [&](const Buffer& from, Buffer& to, std::int64_t heads, bool split) {
    kernel_call<Buffer> p;
    p.kind = split ? op::split_heads : op::merge_heads;
    p.type = call.type;
    p.in[0] = &from;
    p.out = &to;
    const std::int64_t dims[4] = {d[0], d[3], heads, d[4]};  // batch, seq, heads, head_dim
    std::copy(dims, dims + 4, p.dims);
    run(p);
  };
  std::array<Buffer, 5> copies;
  kernel_call<Buffer> apart = call;
  apart.token_major = false;
  apart.output_kept = false;  // (the kept output is token-major; the head-major call recomputes it)
  apart.side = nullptr;
  for (int k = 0; k < inputs; ++k) {
    Buffer& copy = copies[static_cast<std::size_t>(k)];
    copy = copy_of(*call.in[k]);
    permute(*call.in[k], copy, heads_of(k), true);
    apart.in[k] = &copy;
  }
  copies[4] = copy_of(*call.out);
  apart.out = &copies[4];
  run(apart);
  permute(copies[4], *call.out, out_heads, false);
}

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
