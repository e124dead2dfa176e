#pragma once
// shardgraph::cpu::backend: the ComputeBackend on host memory, with Eigen GEMMs. It is the
// numerical reference every other backend is compared with.
//
// Kernels compute in f64 or f32. Values may also be bf16 or f16 (mixed precision): a kernel that
// reads or writes one widens its 16-bit inputs to f32, computes in f32, and rounds its output to the
// output's dtype once, the contract of a GPU kernel on 16-bit tensors with f32 accumulation.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/cpu/available_memory.hpp"
#include "shardgraph/cpu/buffer.hpp"
#include "shardgraph/cpu/float_conversion.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/cpu/backward.hpp"
#include "shardgraph/cpu/cached_attention.hpp"
#include "shardgraph/cpu/kernels.hpp"
#include "shardgraph/optim/adamw.hpp"
#include "shardgraph/optim/grad_clip.hpp"

namespace shardgraph::cpu {

class backend {
 public:
  using buffer = cpu::buffer;
  // The reference kernels run one step each; the only fused kind they take is a linear's bias (x w
  // then + b in T, as the add_bias step rounds it). The core lowers every other fused kind into the
  // steps it stands for (compute/lower_fused.hpp).
  struct traits {
    static constexpr std::string_view name = "cpu";  // custom ops' kernels for it: {"cpu", &fn}
    static constexpr compute::fused_set runs{compute::fused::linear_bias};
  };
  // Where a buffer's memory starts: the core finds a batched call's strides by it.
  static const void* address(const buffer& b) { return b.bytes(); }
  backend() = default;
  backend(const backend&) {}  // scratch memory is per instance
  backend& operator=(const backend&) { return *this; }
  backend(backend&&) = default;
  backend& operator=(backend&&) = default;

  // Zero-filled; a shardgraph::error naming the bytes where the host cannot give them.
  buffer allocate(dtype type, std::int64_t numel) {
    return buffer(type, numel);
  }
  // What bind may still allocate: the host's available memory (available_memory.hpp).
  std::size_t free_bytes() const { return available_memory(); }
  // numel elements in arena's bytes from offset on, not owned (the executor's memory plan).
  buffer view(buffer& arena, std::size_t offset, dtype type, std::int64_t numel) {
    return buffer::view_of(arena, offset, type, numel);
  }
  void upload(buffer& b, const void* host) { std::memcpy(b.bytes(), host, b.size_bytes()); }
  void download(const buffer& b, void* host) { std::memcpy(host, b.bytes(), b.size_bytes()); }
  void copy(const buffer& from, buffer& to) {
    if (from.size_bytes() != to.size_bytes())
      fail("cpu::backend::copy", std::to_string(from.size_bytes()) + " bytes into " + std::to_string(to.size_bytes()),
           "this is a bug in the executor; please report it");
    if (from.bytes() != to.bytes()) std::memcpy(to.bytes(), from.bytes(), from.size_bytes());
  }
  void* data(buffer& b) { return b.bytes(); }

  // (outer, parts*mid, inner) -> [parts][outer][mid][inner]
  void deinterleave(const buffer& from, buffer& to, compute::block_layout l) { move_blocks(from, to, l, false); }
  // [parts][outer][mid][inner] -> (outer, parts*mid, inner)
  void interleave(const buffer& from, buffer& to, compute::block_layout l) { move_blocks(from, to, l, true); }
  void slice(const buffer& from, buffer& to, compute::block_layout l, std::int64_t index) {
    const std::size_t row = static_cast<std::size_t>(l.mid * l.inner * l.element_bytes);
    for (std::int64_t o = 0; o < l.outer; ++o)
      std::memcpy(to.bytes() + static_cast<std::size_t>(o) * row,
                  from.bytes() + static_cast<std::size_t>((o * l.parts + index)) * row, row);
  }

  // The optimizer's work (compute::TrainingBackend). AdamW runs on f32 and f64 buffers (the master
  // weights of mixed precision are f32); the other operations take any floating dtype, and
  // add_scaled and convert may mix them (a bf16 gradient added into an f32 sum).
  double sum_of_squares(const buffer& b) {
    if (!is_half_float(b.type()))
      return with_float(b, [&](auto* x) { return shardgraph::sum_of_squares<std::remove_const_t<std::remove_pointer_t<decltype(x)>>>({x, size(b)}); });
    return with_any_float(b, "cpu::backend::sum_of_squares", [&](auto* x) {
      double sum = 0;
      for (std::size_t i = 0; i < size(b); ++i) sum += static_cast<double>(widen(x[i])) * static_cast<double>(widen(x[i]));
      return sum;
    });
  }
  void scale(buffer& b, double factor) {
    with_any_float(b, "cpu::backend::scale", [&](auto* x) {
      using T = std::remove_pointer_t<decltype(x)>;
      for (std::size_t i = 0; i < size(b); ++i) x[i] = narrow<T>(widen(x[i]) * factor);
    });
  }
  void add_scaled(const buffer& from, buffer& to, double factor) {
    if (from.numel() != to.numel())
      fail("cpu::backend::add_scaled", "buffers of different size", "this is a bug in the trainer; please report it");
    with_any_float(to, "cpu::backend::add_scaled", [&](auto* y) {
      using T = std::remove_pointer_t<decltype(y)>;
      with_any_float(from, "cpu::backend::add_scaled", [&](auto* x) {
        for (std::size_t i = 0; i < size(to); ++i) y[i] = narrow<T>(widen(y[i]) + factor * widen(x[i]));
      });
    });
  }
  void convert(const buffer& from, buffer& to) { convert_floats(from, to); }
  void fill_zero(buffer& b) { std::memset(b.bytes(), 0, b.size_bytes()); }
  bool all_finite(const buffer& b) {
    return with_any_float(b, "cpu::backend::all_finite", [&](auto* x) {
      for (std::size_t i = 0; i < size(b); ++i)
        if (!std::isfinite(widen(x[i]))) return false;
      return true;
    });
  }
  void copy_range(const buffer& from, std::int64_t from_offset, buffer& to, std::int64_t to_offset, std::int64_t count) {
    if (from.type() != to.type() || from_offset < 0 || to_offset < 0 || count < 0 || from_offset + count > from.numel() ||
        to_offset + count > to.numel())
      fail("cpu::backend::copy_range", "the range leaves a buffer or the dtypes differ",
           "this is a bug in the trainer; please report it");
    const std::size_t e = dtype_size(from.type());
    std::memcpy(to.bytes() + static_cast<std::size_t>(to_offset) * e, from.bytes() + static_cast<std::size_t>(from_offset) * e,
                static_cast<std::size_t>(count) * e);
  }
  void adamw(buffer& param, const buffer& grad, buffer& m, buffer& v, const compute::adamw_arguments& a) {
    check_same(grad, param, "adamw");
    check_same(m, param, "adamw");
    check_same(v, param, "adamw");
    adamw_config c{.lr = a.lr, .beta1 = a.beta1, .beta2 = a.beta2, .eps = a.eps, .weight_decay = a.weight_decay};
    with_float(param, [&](auto* p) {
      using T = std::remove_pointer_t<decltype(p)>;
      adamw_step<T>({p, size(param)}, {grad.as<T>(), size(param)}, {m.as<T>(), size(param)}, {v.as<T>(), size(param)}, c,
                    a.step, a.lr, a.weight_decay > 0);
      return 0.0;
    });
  }
  // The trainer's updates in one call (compute::adamw_update): as adamw() and convert() per
  // parameter, the gradient first widened to the parameter's dtype and scaled as scale() rounds.
  void adamw_many(std::span<const compute::adamw_update<buffer>> updates) {
    for (const compute::adamw_update<buffer>& u : updates) {
      const buffer* grad = u.grad;
      buffer widened;
      if (grad->type() != u.param->type() || u.grad_factor != 1.0) {
        if (grad->numel() != u.param->numel())
          fail("cpu::backend::adamw_many", "the gradient differs in size from the parameter",
               "this is a bug in the trainer; please report it");
        widened = allocate(u.param->type(), u.param->numel());
        convert(*grad, widened);
        if (u.grad_factor != 1.0) scale(widened, u.grad_factor);
        grad = &widened;
      }
      adamw(*u.param, *grad, *u.m, *u.v, u.arguments);
      if (u.rounded != nullptr) convert(*u.param, *u.rounded);
    }
  }

  // Runs one kernel call. Defined after the class: inline, or, in a program that defines
  // SHARDGRAPH_CPU_KERNELS_SEPARATE in every unit, once, in the unit that includes
  // cpu/separate_kernels.hpp (the kernels' templates are then instantiated there only).
  void run(const compute::kernel_call<buffer>& call);

 private:
  // A template (Call is kernel_call<buffer>), so that the kernels it names are instantiated only
  // where run is defined.
  template <class Call>
  void dispatch(const Call& call) {
    if (touches_half_floats(call) && call.kind == op::cached_attention)  // a widened copy would lose the cache's writes
      fail("cpu::backend: cached_attention", "a KV cache in " + std::string(dtype_name(call.type)) + " is not implemented",
           "build the generation program in f32 or f64");
    if (touches_half_floats(call)) return run_widened(call);
    if (call.type == dtype::f64) return run_typed<double>(call);
    if (call.type == dtype::f32) return run_typed<float>(call);
    fail("cpu::backend", "op " + std::string(op_name(call.kind)) + " on dtype " + std::string(dtype_name(call.type)),
         "the cpu backend computes in f32 or f64");
  }

  static void move_blocks(const buffer& from, buffer& to, compute::block_layout l, bool to_interleaved) {
    const std::size_t row = static_cast<std::size_t>(l.mid * l.inner * l.element_bytes);
    for (std::int64_t p = 0; p < l.parts; ++p)
      for (std::int64_t o = 0; o < l.outer; ++o) {
        std::size_t interleaved = static_cast<std::size_t>(o * l.parts + p) * row;
        std::size_t blocked = static_cast<std::size_t>(p * l.outer + o) * row;
        if (to_interleaved) std::memcpy(to.bytes() + interleaved, from.bytes() + blocked, row);
        else std::memcpy(to.bytes() + blocked, from.bytes() + interleaved, row);
      }
  }

  std::vector<std::byte> scratch_;
  std::vector<buffer> widened_;  // f32 copies of a call's 16-bit buffers, reused across calls

  static bool touches_half_floats(const compute::kernel_call<buffer>& c) {
    if (is_half_float(c.out->type())) return true;
    for (const buffer* b : c.in)
      if (b != nullptr && is_half_float(b->type())) return true;
    for (int k = 0; k < c.operand_count; ++k)
      if (is_half_float(c.operands[k]->type())) return true;
    return c.bias != nullptr && is_half_float(c.bias->type());
  }

  // The call on f32 copies of its 16-bit buffers, then the f32 result rounded into the output.
  template <class Call>
  void run_widened(const Call& call) {
    Call wide = call;
    std::vector<const buffer*> originals;  // the buffer widened into widened_[k]
    widened_.resize(max_inputs + compute::max_chain + 3);
    auto widen_input = [&](const buffer* b) -> const buffer* {
      if (b == nullptr || !is_half_float(b->type())) return b;
      for (std::size_t k = 0; k < originals.size(); ++k)
        if (originals[k] == b) return &widened_[k];
      buffer& copy = widened_[originals.size()];
      originals.push_back(b);
      if (copy.numel() != b->numel() || copy.type() != dtype::f32) copy = buffer(dtype::f32, b->numel());
      convert_floats(*b, copy);
      return &copy;
    };
    for (const buffer*& b : wide.in) b = widen_input(b);
    for (int k = 0; k < wide.operand_count; ++k) wide.operands[k] = widen_input(wide.operands[k]);
    wide.bias = widen_input(wide.bias);
    buffer& out = widened_.back();
    if (is_half_float(call.out->type())) {
      if (out.numel() != call.out->numel() || out.type() != dtype::f32) out = buffer(dtype::f32, call.out->numel());
      wide.out = &out;
    }
    wide.type = dtype::f32;
    run_typed<float>(wide);
    if (wide.out != call.out) convert_floats(out, *call.out);
  }

  static std::size_t size(const buffer& b) { return static_cast<std::size_t>(b.numel()); }
  static void check_same(const buffer& a, const buffer& b, const char* what) {
    if (a.type() != b.type() || a.numel() != b.numel())
      fail(std::string("cpu::backend::") + what, "buffers of different dtype or size", "this is a bug in the trainer; please report it");
  }
  template <class Fn>
  static double with_float(const buffer& b, Fn&& fn) {
    if (b.type() == dtype::f64) return fn(const_cast<double*>(b.as<double>()));
    if (b.type() == dtype::f32) return fn(const_cast<float*>(b.as<float>()));
    fail("cpu::backend", "the optimizer works on f32 and f64 values, not " + std::string(dtype_name(b.type())),
         "build the model with dtype f32 or f64");
  }

  template <class T>
  static const T* in(const compute::kernel_call<buffer>& c, int k) { return c.in[k]->as<T>(); }
  // An attention call's (or its gradient's) keys seen: kernel_call::masking and its mask input.
  static key_visibility visibility(const compute::kernel_call<buffer>& c) {
    key_visibility seen{.masking = c.masking};
    if (c.masking.mask == attention_mask::none) return seen;
    const buffer* mask = c.in[attention_mask_input(c.kind != op::attention)];
    if (mask == nullptr || mask->type() != dtype::i64)
      fail("cpu::backend: " + std::string(op_name(c.kind)), "the call's mask input is missing or not i64",
           "pass the mask (batch, seq) i64 after q, k, v (and dout), as kernel_call::masking states");
    seen.mask = mask->as<std::int64_t>();
    return seen;
  }
  // An attention call's (or its gradient's) sizes: dims {batch, heads, kv_heads, seq, head_dim, keys}.
  static attention_sizes attention_sizes_of(const compute::kernel_call<buffer>& c) {
    const std::int64_t* d = c.dims;
    return {d[0], d[1], d[2], d[3], d[4], compute::attention_keys(d)};
  }
  // A rope or rope_grad call's frequency table (kernel_call::rope), which the executor plans at bind.
  static const compute::rope_frequencies& rope_table(const compute::kernel_call<buffer>& c) {
    if (c.rope == nullptr)
      fail("cpu::backend: " + std::string(op_name(c.kind)), "the call carries no frequency table (kernel_call::rope)",
           "set it to a compute::make_rope_frequencies table, as the executor does at bind");
    return *c.rope;
  }

  // The vocabulary-parallel cross-entropy (cpu/vocab_parallel_loss.hpp). Its statistics' dims are
  // {rows, columns, classes, offset, ignore_index, ranks}; its loss's and gradient's are the loss's
  // {rows, columns, classes, divisor, ignore_index, offset}.
  static vocab_slice vocab_slice_of(const compute::kernel_call<buffer>& c) {
    const std::int64_t* d = c.dims;
    const bool loss = c.kind == op::cross_entropy || c.kind == op::cross_entropy_grad;
    return {.rows = d[0], .columns = d[1], .classes = d[2], .offset = loss ? d[5] : d[3], .ignore_index = d[4],
            .ranks = loss ? 1 : d[5]};
  }
  // A loss's targets, each a class or the ignore index (the loss's dims).
  static const std::int64_t* checked_targets(const compute::kernel_call<buffer>& c) {
    const std::int64_t* targets = c.in[1]->as<std::int64_t>();
    detail::check_targets("cpu::backend: cross_entropy", targets, c.dims[0], c.dims[2], c.dims[4]);
    return targets;
  }
  // (logits, targets, lse, stats) -> the counted rows' lse - target logit, / divisor.
  template <class T>
  void vocab_parallel_loss(const compute::kernel_call<buffer>& c) {
    c.out->as<T>()[0] = static_cast<T>(
        vocab_cross_entropy_sum(checked_targets(c), in<T>(c, 2), in<T>(c, 3), c.dims[0], c.dims[4]) /
        static_cast<double>(c.dims[3]));
  }

  // A generation program's kv_context input (batch, table) i32 (passes/attach_kv_cache.hpp), in[k].
  static const std::int32_t* kv_context(const compute::kernel_call<buffer>& c, int k) {
    if (c.in[k] == nullptr || c.in[k]->type() != dtype::i32)
      fail("cpu::backend: " + std::string(op_name(c.kind)), "the call's kv_context input is missing or not i32",
           "pass kv_context (batch, 1 + blocks) i32 as the program's input");
    return c.in[k]->as<std::int32_t>();
  }
  static std::vector<std::int64_t> context_offsets(const compute::kernel_call<buffer>& c, int k, std::int64_t batch,
                                                   std::int64_t seq) {
    return cpu::context_offsets(kv_context(c, k), batch, seq, c.in[k]->numel() / batch,
                                ("cpu::backend: " + std::string(op_name(c.kind))).c_str());
  }
  // x (batch, seq, cols) + table[position] (positions, cols); dims {batch, seq, cols}. Token t
  // sits at position t, or, in a generation program, at its row's offset plus t.
  template <class T>
  void position_embedding(const compute::kernel_call<buffer>& c) {
    const std::int64_t* d = c.dims;
    const T* x = in<T>(c, 0);
    const T* table = in<T>(c, 1);
    T* out = c.out->as<T>();
    const std::vector<std::int64_t> offsets =
        c.in[2] != nullptr ? context_offsets(c, 2, d[0], d[1]) : std::vector<std::int64_t>(static_cast<std::size_t>(d[0]), 0);
    const std::int64_t positions = c.in[1]->numel() / d[2];
    for (std::int64_t b = 0; b < d[0]; ++b)
      for (std::int64_t t = 0; t < d[1]; ++t) {
        const std::int64_t p = offsets[static_cast<std::size_t>(b)] + t;
        if (p >= positions)
          fail("cpu::backend: position_embedding", "position " + std::to_string(p) + " is past the table's " +
                   std::to_string(positions) + " learned positions",
               "stop generating at the model's positions (n_positions)");
        for (std::int64_t j = 0; j < d[2]; ++j) {
          const std::int64_t i = (b * d[1] + t) * d[2] + j;
          out[i] = x[i] + table[p * d[2] + j];
        }
      }
  }
  // q, k, v, the cache (written in place: a plan-owned value the call updates), kv_context; dims
  // {batch, heads, kv_heads, seq, head_dim, block_tokens} (cpu/cached_attention.hpp).
  template <class T>
  void cached_attention(const compute::kernel_call<buffer>& c) {
    const std::int64_t* d = c.dims;
    const std::int64_t blocks = c.in[3]->numel() / (d[2] * 2 * d[5] * d[4]);
    cpu::cached_attention(in<T>(c, 0), in<T>(c, 1), in<T>(c, 2), const_cast<T*>(in<T>(c, 3)), kv_context(c, 4),
                          c.out->as<T>(), {d[0], d[1], d[2], d[3], d[4], d[5], blocks, c.in[4]->numel() / d[0]},
                          compute::attention_scale(c.scalar, d[4]));
  }

  template <class T>
  void run_typed(const compute::kernel_call<buffer>& c) {
    T* out = c.out->as<T>();
    const std::int64_t* d = c.dims;
    switch (c.kind) {
      case op::embedding:
        return embedding(c.in[0]->as<std::int64_t>(), in<T>(c, 1), out, d[0], d[1], d[2], d[3]);
      case op::position_embedding: return position_embedding<T>(c);
      case op::linear:
        gemm(in<T>(c, 0), in<T>(c, 1), out, d[0], d[1], d[2], c.transpose_b);
        if (c.bias != nullptr)  // kernel_call::bias: + b per row, as the add_bias chain would
          for (std::int64_t r = 0; r < d[0]; ++r)
            for (std::int64_t j = 0; j < d[2]; ++j) out[r * d[2] + j] += c.bias->as<T>()[j];
        return;
      case op::matmul: return batched_gemm(in<T>(c, 0), in<T>(c, 1), out, d[0], d[1], d[2], d[3], false);
      case op::layer_norm: return layer_norm(in<T>(c, 0), in<T>(c, 1), in<T>(c, 2), out, d[0], d[1], c.scalar);
      case op::rms_norm: return rms_norm(in<T>(c, 0), in<T>(c, 1), out, d[0], d[1], c.scalar);
      case op::softmax: return softmax(in<T>(c, 0), out, d[0], d[1]);
      case op::rope: {
        std::memcpy(out, in<T>(c, 0), static_cast<std::size_t>(d[0] * d[1] * d[2] * d[3]) * sizeof(T));
        if (c.in[1] == nullptr) return rope(out, d[0], d[1], d[2], d[3], rope_table(c));
        const std::vector<std::int64_t> offsets = context_offsets(c, 1, d[0], d[2]);
        for (std::int64_t b = 0; b < d[0]; ++b)  // a generation program's: each row at its own positions
          rope(out + b * d[1] * d[2] * d[3], 1, d[1], d[2], d[3], rope_table(c), offsets[static_cast<std::size_t>(b)]);
        return;
      }
      case op::cached_attention: return cached_attention<T>(c);
      case op::split_heads: return split_heads(in<T>(c, 0), out, d[0], d[1], d[2], d[3]);
      case op::merge_heads: return merge_heads(in<T>(c, 0), out, d[0], d[1], d[2], d[3]);
      case op::permute: return permute(in<T>(c, 0), out, d, d[4]);
      case op::concat: {
        const T* parts[4]{};
        int count = 0;
        for (; count < 4 && c.in[count] != nullptr; ++count) parts[count] = in<T>(c, count);
        return concat_along(parts, d + 2, count, out, d[0], d[1]);
      }
      case op::slice: return slice_along(in<T>(c, 0), out, d[0], d[1], d[2], d[3], d[4]);
      case op::slice_grad: return pad_along(in<T>(c, 0), out, d[0], d[1], d[2], d[3], d[4]);
      case op::sum:
      case op::mean: return sum_along(in<T>(c, 0), out, d[0], d[1], d[2], d[3]);
      case op::broadcast: return broadcast_along(in<T>(c, 0), out, d[0], d[1], d[2], d[3]);
      case op::patchify: return patchify(in<T>(c, 0), out, d[0], d[1], d[2], d[3], d[4]);
      case op::unpatchify: return unpatchify(in<T>(c, 0), out, d[0], d[1], d[2], d[3], d[4]);
      case op::unfold1d: return unfold1d(in<T>(c, 0), out, d[0], d[1], d[2], d[3], d[4], d[5]);
      case op::fold1d: return fold1d(in<T>(c, 0), out, d[0], d[1], d[2], d[3], d[4], d[5]);
      case op::dropout: return dropout(in<T>(c, 0), out, d, c.scalar, c.dropout);
      case op::attention:
        return scaled_dot_product_attention(in<T>(c, 0), in<T>(c, 1), in<T>(c, 2), out, attention_sizes_of(c),
                                            c.scalar, visibility(c));
      case op::cross_entropy:  // a mean over no target is 0 / 0: NaN, as torch's
        if (c.in[2] != nullptr) return vocab_parallel_loss<T>(c);
        out[0] = static_cast<T>(cross_entropy_sum(in<T>(c, 0), c.in[1]->as<std::int64_t>(), d[0], d[1], nullptr,
                                                  {.classes = d[2], .ignore_index = d[4]}) /
                                static_cast<double>(d[3]));
        return;
      case op::vocab_statistics:
        return vocab_statistics(in<T>(c, 0), c.in[1]->as<std::int64_t>(), out, vocab_slice_of(c));
      case op::vocab_exp_sum: return vocab_exp_sum(in<T>(c, 0), in<T>(c, 1), out, vocab_slice_of(c));
      case op::vocab_log_sum_exp: return vocab_log_sum_exp(in<T>(c, 0), in<T>(c, 1), out, d[0]);
      case op::add:
      case op::mul:
      case op::add_bias:
      case op::gelu:
      case op::silu:
      case op::relu:
      case op::gelu_erf:
      case op::quick_gelu: return run_chain<T>(c);
      default: return run_gradient<T>(c);
    }
  }

  // The ops autodiff emits. Kernels that produce several gradients at once write the ones not
  // asked for into scratch memory.
  template <class T>
  void run_gradient(const compute::kernel_call<buffer>& c) {
    T* out = c.out->as<T>();
    const std::int64_t* d = c.dims;
    const std::size_t out_bytes = c.out->size_bytes();
    auto scratch = [&](std::int64_t n) -> T* {
      scratch_.assign(static_cast<std::size_t>(n) * sizeof(T), std::byte{0});
      return reinterpret_cast<T*>(scratch_.data());
    };
    switch (c.kind) {
      case op::transpose:
        for (std::int64_t b = 0; b < d[0]; ++b)
          for (std::int64_t i = 0; i < d[1]; ++i)
            for (std::int64_t j = 0; j < d[2]; ++j) out[(b * d[2] + j) * d[1] + i] = in<T>(c, 0)[(b * d[1] + i) * d[2] + j];
        return;
      case op::linear_weight_grad:  // x (rows, k), dy (rows, n): (k, n) = x^T dy, or (n, k) = dy^T x
        if (c.transpose_b) return gemm_at_b(in<T>(c, 1), in<T>(c, 0), out, d[0], d[2], d[1], false);
        return gemm_at_b(in<T>(c, 0), in<T>(c, 1), out, d[0], d[1], d[2], false);
      case op::bias_grad:
        std::memset(out, 0, out_bytes);
        return bias_backward(in<T>(c, 0), out, d[0], d[1]);
      case op::gelu_grad: return activation_backward<T>(c, gelu_tanh_grad<T>);
      case op::silu_grad: return activation_backward<T>(c, silu_grad<T>);
      case op::relu_grad: return activation_backward<T>(c, relu_grad<T>);
      case op::gelu_erf_grad: return activation_backward<T>(c, gelu_erf_grad<T>);
      case op::quick_gelu_grad: return activation_backward<T>(c, quick_gelu_grad<T>);
      case op::layer_norm_grad_x: {
        T* dw = scratch(2 * d[1]);
        return layer_norm_backward(in<T>(c, 0), in<T>(c, 1), in<T>(c, 2), out, dw, dw + d[1], d[0], d[1], c.scalar);
      }
      case op::layer_norm_grad_w: {  // dw does not depend on w: use ones
        T* tmp = scratch(d[0] * d[1] + 2 * d[1]);
        T* ones = tmp + d[0] * d[1];
        for (std::int64_t j = 0; j < d[1]; ++j) ones[j] = T(1);
        std::memset(out, 0, out_bytes);
        return layer_norm_backward(in<T>(c, 0), ones, in<T>(c, 1), tmp, out, ones + d[1], d[0], d[1], c.scalar);
      }
      case op::rms_norm_grad_x: {
        T* dw = scratch(d[1]);
        return rms_norm_backward(in<T>(c, 0), in<T>(c, 1), in<T>(c, 2), out, dw, d[0], d[1], c.scalar);
      }
      case op::rms_norm_grad_w: {
        T* tmp = scratch(d[0] * d[1] + d[1]);
        T* ones = tmp + d[0] * d[1];
        for (std::int64_t j = 0; j < d[1]; ++j) ones[j] = T(1);
        std::memset(out, 0, out_bytes);
        return rms_norm_backward(in<T>(c, 0), ones, in<T>(c, 1), tmp, out, d[0], d[1], c.scalar);
      }
      case op::rope_grad:
        std::memcpy(out, in<T>(c, 0), out_bytes);
        return rope_backward(out, d[0], d[1], d[2], d[3], rope_table(c));
      case op::attention_grad_q:
      case op::attention_grad_k:
      case op::attention_grad_v: {
        const std::int64_t q_size = d[0] * d[1] * d[3] * d[4], kv_size = d[0] * d[2] * compute::attention_keys(d) * d[4];
        T* dq = scratch(q_size + 2 * kv_size);
        T* dk = dq + q_size;
        T* dv = dk + kv_size;
        scaled_dot_product_attention_backward(in<T>(c, 0), in<T>(c, 1), in<T>(c, 2), in<T>(c, 3), dq, dk, dv,
                                              attention_sizes_of(c), c.scalar, visibility(c));
        const T* wanted = c.kind == op::attention_grad_q ? dq : c.kind == op::attention_grad_k ? dk : dv;
        std::memcpy(out, wanted, out_bytes);
        return;
      }
      case op::softmax_grad: return softmax_backward(in<T>(c, 0), in<T>(c, 1), out, d[0], d[1]);
      case op::embedding_grad:
        std::memset(out, 0, out_bytes);
        return embedding_backward(c.in[0]->as<std::int64_t>(), in<T>(c, 1), out, d[0], d[1], d[2], d[3]);
      case op::position_embedding_grad:
        std::memset(out, 0, out_bytes);
        return position_embedding_backward(in<T>(c, 0), out, d[0], d[1], d[2]);
      case op::cross_entropy_grad:
        if (c.in[3] != nullptr)  // vocabulary parallel: (logits, targets, d loss, lse)
          return vocab_cross_entropy_backward(in<T>(c, 0), checked_targets(c), in<T>(c, 3), out, vocab_slice_of(c),
                                              static_cast<double>(in<T>(c, 2)[0]) / static_cast<double>(d[3]));
        return cross_entropy_backward(in<T>(c, 0), c.in[1]->as<std::int64_t>(), out, d[0], d[1],
                                      static_cast<double>(in<T>(c, 2)[0]) / static_cast<double>(d[3]),
                                      {.classes = d[2], .ignore_index = d[4]});
      case op::ones:  // the loss gradient's seed: 1, or the loss scale
        for (std::int64_t i = 0; i < d[0]; ++i) out[i] = c.scalar != 0 ? static_cast<T>(c.scalar) : T(1);
        return;
      default:
        fail("cpu::backend", "op " + std::string(op_name(c.kind)) + " has no cpu kernel",
             "this is a bug in the executor; please report it");
    }
  }

  // (x, dy) -> out = derivative(x) * dy, element by element ({numel}).
  template <class T, class Derivative>
  static void activation_backward(const compute::kernel_call<buffer>& c, Derivative derivative) {
    T* out = c.out->as<T>();
    for (std::int64_t i = 0; i < c.dims[0]; ++i) out[i] = derivative(in<T>(c, 0)[i]) * in<T>(c, 1)[i];
  }

  // value = operands[0][i], then each step: value = kind(value, operand[i % period]).
  template <class T>
  static void run_chain(const compute::kernel_call<buffer>& c) {
    T* out = c.out->as<T>();
    const T* start = c.operands[0]->as<T>();
    const T* operand[compute::max_chain + 1]{};
    for (int k = 0; k < c.operand_count; ++k) operand[k] = c.operands[k]->as<T>();
    for (std::int64_t i = 0; i < c.dims[0]; ++i) {
      T v = start[i];
      for (int s = 0; s < c.chain_length; ++s) {
        const compute::elementwise_step& st = c.chain[s];
        T o = st.operand < 0 ? T(0) : operand[st.operand][st.period > 0 ? i % st.period : i];
        switch (st.kind) {
          case op::add:
          case op::add_bias: v += o; break;
          case op::mul: v *= o; break;
          case op::gelu: v = gelu_tanh(v); break;
          case op::silu: v = silu(v); break;
          case op::relu: v = relu(v); break;
          case op::gelu_erf: v = gelu_erf(v); break;
          case op::quick_gelu: v = quick_gelu(v); break;
          default: break;
        }
      }
      out[i] = v;
    }
  }
};

#ifndef SHARDGRAPH_CPU_KERNELS_SEPARATE
inline void backend::run(const compute::kernel_call<buffer>& call) { dispatch(call); }
#endif

}  // namespace shardgraph::cpu
