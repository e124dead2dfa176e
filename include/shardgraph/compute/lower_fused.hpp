#pragma once
// Lowering of fused kinds (compute/fused_kinds.hpp): a call of a fused kind as the calls it stands
// for, for a backend whose traits do not declare that kind. The core runs every call through
// fused_lowering, so a backend receives only the kinds it runs; a backend whose kernel takes a
// declared kind only for some shapes may call the split functions below itself.
//
//   compute::fused_lowering<cpu::backend> lower;
//   lower.run(backend, call, compute::fused_kinds_run_by<cpu::backend>());
//
// Each part is rounded as the step it stands for would round it: the parts are the program's steps.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>

#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/compute/fused_kinds.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/half.hpp"

namespace shardgraph::compute {

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
// dk and dv of the same operands, for a backend that does not run them together.
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
// bias gradient, as split_bias_grad splits it further), for a backend that does not run them together.
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
// out (in place), for a backend that does not run them together. The rounding is that of the two steps.
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

// A token-major attention call (kernel_call::token_major; with dk and dv when it carries them) run
// as the split_heads steps, the head-major call and the merge_heads steps it stands for would run
// it, for a backend whose kernel takes head-major operands only: the same values, rounded the same.
// `copy_of(like)` gives a buffer of like's dtype and size for a head-major copy (inputs in order,
// then the results).
template <class Buffer, class Run, class CopyOf>
void run_token_major_apart(const kernel_call<Buffer>& call, Run&& run, CopyOf&& copy_of) {
  const std::int64_t* d = call.dims;  // batch, heads, kv_heads, seq, head_dim, keys
  const int inputs = call.kind == op::attention ? 3 : 4;
  const std::int64_t keys = attention_keys(d);
  const auto heads_of = [&](int k) { return k == 1 || k == 2 ? d[2] : d[1]; };     // k, v: kv heads
  const auto length_of = [&](int k) { return k == 1 || k == 2 ? keys : d[3]; };  // k, v: keys long
  const bool key_result = call.kind == op::attention_grad_k || call.kind == op::attention_grad_v;
  const std::int64_t out_heads = key_result ? d[2] : d[1];
  const auto permute = [&](const Buffer& from, Buffer& to, std::int64_t heads, std::int64_t length, bool split) {
    kernel_call<Buffer> p;
    p.kind = split ? op::split_heads : op::merge_heads;
    p.type = call.type;
    p.in[0] = &from;
    p.out = &to;
    const std::int64_t dims[4] = {d[0], length, heads, d[4]};  // batch, seq, heads, head_dim
    std::copy(dims, dims + 4, p.dims);
    run(p);
  };
  std::array<Buffer, 7> copies;
  kernel_call<Buffer> apart = call;
  apart.token_major = false;
  apart.output_kept = false;  // (the kept output is token-major; the head-major call recomputes it)
  apart.side = nullptr;
  apart.saved = nullptr;
  for (int k = 0; k < inputs; ++k) {
    Buffer& copy = copies[static_cast<std::size_t>(k)];
    copy = copy_of(*call.in[k]);
    permute(*call.in[k], copy, heads_of(k), length_of(k), true);
    apart.in[k] = &copy;
  }
  copies[4] = copy_of(*call.out);
  apart.out = &copies[4];
  if (call.key_grad != nullptr) {  // fused::attention_backward: dk and dv (kv heads) too
    copies[5] = copy_of(*call.key_grad);
    copies[6] = copy_of(*call.value_grad);
    apart.key_grad = &copies[5];
    apart.value_grad = &copies[6];
  }
  run(apart);
  permute(copies[4], *call.out, out_heads, key_result ? keys : d[3], false);
  if (call.key_grad != nullptr) {
    permute(copies[5], *call.key_grad, d[2], keys, false);
    permute(copies[6], *call.value_grad, d[2], keys, false);
  }
}

// A linear carrying its bias (fused::linear_bias) as the product, then the add_bias step in place.
template <class Buffer>
product_and_elementwise<Buffer> split_linear_bias(const kernel_call<Buffer>& c) {
  product_and_elementwise<Buffer> apart{.product = c, .elementwise = {}};
  apart.product.bias = nullptr;
  kernel_call<Buffer>& e = apart.elementwise;
  e.kind = op::add_bias;
  e.type = c.type;
  e.out = c.out;
  e.dims[0] = c.out->numel();
  e.operands[e.operand_count++] = c.out;
  e.operands[e.operand_count++] = c.bias;
  e.chain[e.chain_length++] = {op::add_bias, 1, c.bias->numel()};
  return apart;
}

// A call whose forward saves row statistics for its backward (fused::attention_saved,
// cross_entropy_saved) as the call without them: a forward that saves nothing, or a backward that
// computes them again from its operands.
template <class Buffer>
kernel_call<Buffer> without_saved_statistics(const kernel_call<Buffer>& c) {
  kernel_call<Buffer> plain = c;
  plain.output_kept = false;
  plain.saved = nullptr;
  if (c.kind != op::attention && c.kind != op::cross_entropy) plain.side = nullptr;  // the forward's result
  return plain;
}

// Runs calls on a backend, each fused kind the backend does not run lowered into its parts (which
// are lowered in turn). Holds what the lowering needs across calls: the loss gradient 1 per dtype.
template <class Backend>
class fused_lowering {
 public:
  using buffer = typename Backend::buffer;
  using call_type = kernel_call<buffer>;

  void run(Backend& backend, const call_type& c, fused_set runs) {
    const fused_set lowered = fused_kinds_of(c).without(runs);
    if (lowered.empty()) return backend.run(c);
    const auto each = [&](const call_type& part) { run(backend, part, runs); };
    if (lowered.has(fused::batched_products)) return run_batch_apart(c, each);
    if (lowered.has(fused::attention_backward)) {
      for (const call_type& part : split_attention_gradients(c)) each(part);
      return;
    }
    if (lowered.has(fused::norm_backward)) return both(split_norm_gradients(c), each);
    if (lowered.has(fused::weight_grad_with_bias) || lowered.has(fused::norm_weight_grad_with_bias))
      return both(split_bias_grad(c), each);
    if (lowered.has(fused::loss_with_gradient))
      return both(split_cross_entropy_gradient(c, one(backend, c.type)), each);
    if (lowered.has(fused::linear_epilogue) || lowered.has(fused::norm_grad_add) ||
        lowered.has(fused::embedding_grad_add))
      return both(split_epilogue(c), each);
    if (lowered.has(fused::attention_token_major))
      return run_token_major_apart(c, each,
                                   [&](const buffer& like) { return backend.allocate(like.type(), like.numel()); });
    if (lowered.has(fused::attention_saved) || lowered.has(fused::cross_entropy_saved))
      return each(without_saved_statistics(c));
    if (lowered.has(fused::linear_bias)) return both(split_linear_bias(c), each);
    fail("compute::fused_lowering", "a call of fused kinds " + lowered.names() + " has no lowering",
         "this is a bug in shardgraph; please report it");
  }

 private:
  template <class Parts, class Each>
  static void both(const Parts& parts, Each& each) {
    const auto& [first, second] = parts;
    each(first);
    each(second);
  }

  template <class Each>
  static void run_batch_apart(const call_type& c, Each& each) {
    if constexpr (requires(const buffer& b) { b.at_offset(std::size_t{0}); }) {
      std::array<buffer, 3> views;
      for (std::int64_t b = 0; b < c.batch; ++b) each(batch_member(c, b, views));
    } else {
      fail("compute::fused_lowering", "a batched product for a backend whose buffers have no at_offset",
           "this is a bug in shardgraph (a batched call is made only where the backend runs it or its "
           "buffers have at_offset); please report it");
    }
  }

  // One element of dtype t holding 1: the loss gradient of a loss run apart from its gradient.
  const buffer& one(Backend& backend, dtype t) {
    for (const buffer& u : ones_)
      if (u.type() == t) return u;
    std::array<unsigned char, 8> bytes{};
    const auto put = [&](auto value) { std::memcpy(bytes.data(), &value, sizeof value); };
    switch (t) {
      case dtype::f64: put(1.0); break;
      case dtype::bf16: put(float_to_bf16(1.0f)); break;
      case dtype::f16: put(float_to_f16(1.0f)); break;
      default: put(1.0f); break;
    }
    buffer& u = ones_.emplace_back(backend.allocate(t, 1));
    backend.upload(u, bytes.data());
    return u;
  }

  std::deque<buffer> ones_;
};

}  // namespace shardgraph::compute
