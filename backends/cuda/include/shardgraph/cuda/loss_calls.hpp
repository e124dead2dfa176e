#pragma once
// The cross-entropy loss of cuda::backend's calls and its gradient (kernels/softmax.cuh): a block
// per row of logits, the vector kernels where rows are 16-byte aligned whole vectors.
//
//   cross_entropy       {rows, vocab, classes, divisor, ignore_index}  logits, targets -> loss (1)
//                       [+ kernel_call::logits_grad, the gradient for a loss gradient of 1]
//   cross_entropy_grad  {rows, vocab, classes, divisor, ignore_index}  logits, targets, dloss
//                       -> dlogits (rows, vocab)
#include <shardgraph/cuda/backend_state.hpp>
#include <shardgraph/cuda/kernel_launch.hpp>
#include <shardgraph/cuda/kernels/norms.cuh>
#include <shardgraph/cuda/kernels/softmax.cuh>
#include <shardgraph/cuda/memory_moves.hpp>
#include <shardgraph/cuda/scratch.hpp>
#include <shardgraph/cuda/tensor_buffer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shardgraph::cuda::detail {

// A cross_entropy call's classes and ignore index (dims {rows, vocab, classes, divisor, ignore_index}).
inline kernels::loss_targets loss_targets_of(const kernel_call& c) {
  return {.classes = c.dims[2], .ignore_index = c.dims[4]};
}

// Cross-entropy rows of logits (in 0, rows x vocab) against targets (in 1): the vector kernels
// for 16-byte aligned rows of whole vectors, whose logits are computed in C.
// With kernel_call::saved (fused::cross_entropy_saved), the vector kernels write each row's
// log-sum-exp into it for the gradient.
template <class C>
void cross_entropy_rows(backend_state& s, const kernel_call& c, C* losses) {
  const std::int64_t* d = c.dims;
  const dtype t = c.in[0]->type();
  const unsigned rows = static_cast<unsigned>(d[0]);
  const void* logits = c.in[0]->data();
  if (vector_ready(t, d[1], {in(c, 0)}) && compute_type_is<C>(t)) {
    C* lse = c.saved != nullptr ? static_cast<C*>(c.saved->data()) : nullptr;
    return with_vector_types(t, [&]<class T, class V>() {
      if constexpr (std::is_same_v<V, C>)
        kernels::cross_entropy_rows_vector_kernel<T, C><<<rows, kernels::row_threads, 0, s.stream>>>(
            typed<T>(*c.in[0]), in(c, 1), losses, d[1], loss_targets_of(c), s.bad_target(), lse);
    });
  }
  kernels::cross_entropy_rows_kernel<C><<<rows, kernels::row_threads, 0, s.stream>>>(
      in(c, 0), in(c, 1), losses, d[1], loss_targets_of(c), s.bad_target());
}

// The rows' losses and the logits' gradient for a loss gradient of 1 (kernel_call::logits_grad,
// which may be the logits' memory): one kernel where the rows are 16-byte aligned whole vectors,
// else the loss's kernel, then the gradient's (each reads an element before writing it).
template <class C>
void cross_entropy_with_gradient(backend_state& s, const kernel_call& c, C* losses) {
  const std::int64_t* d = c.dims;
  tensor_buffer& g = *c.logits_grad;
  const dtype t = g.type();
  const unsigned rows = static_cast<unsigned>(d[0]);
  if (c.in[0]->type() == t && vector_ready(t, d[1], {in(c, 0), in(g)}) && compute_type_is<C>(t)) {
    return with_vector_types(t, [&]<class T, class V>() {
      if constexpr (std::is_same_v<V, C>) {
        const T* logits = typed<T>(*c.in[0]);
        T* gradient = static_cast<T*>(g.data());
        const C scale = C(1) / C(d[3]);
        // Two rows in shared memory, with room for the reductions' static shared memory.
        const std::size_t shared = kernels::loss_grad_staged_bytes<T>(d[1]);
        if (shared + 1024 <= s.shared_per_block) {
          const auto kernel = kernels::cross_entropy_with_grad_staged_kernel<T, C>;
          const std::int64_t blocks =
              std::min<std::int64_t>(resident_blocks(s, kernel, shared, kernels::loss_grad_threads), d[0]);
          kernel<<<static_cast<unsigned>(blocks), kernels::loss_grad_threads, shared, s.stream>>>(
              logits, in(c, 1), losses, gradient, d[0], d[1], loss_targets_of(c), scale, s.bad_target());
        } else {
          kernels::cross_entropy_with_grad_vector_kernel<T, C>
              <<<rows, kernels::loss_grad_threads, 0, s.stream>>>(logits, in(c, 1), losses, gradient, d[1],
                                                                  loss_targets_of(c), scale, s.bad_target());
        }
      }
    });
  }
  kernels::cross_entropy_rows_kernel<C><<<rows, kernels::row_threads, 0, s.stream>>>(
      in(c, 0), in(c, 1), losses, d[1], loss_targets_of(c), s.bad_target());
  kernels::cross_entropy_grad_kernel<C><<<rows, kernels::row_threads, 0, s.stream>>>(
      in(c, 0), in(c, 1), kernels::ref{}, out(g), d[1], loss_targets_of(c), C(d[3]), s.bad_target());
}

// The loss (out, one element): the rows' losses in scratch, then their sum / divisor.
template <class C>
void cross_entropy(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  C* losses = s.scratch.get<C>(scratch_use::row_losses, static_cast<std::size_t>(d[0]));
  if (d[0] == 0) return fill_zero(s, *c.out);
  if (c.logits_grad != nullptr)
    cross_entropy_with_gradient<C>(s, c, losses);
  else
    cross_entropy_rows<C>(s, c, losses);
  kernels::sum_rows_kernel<C><<<1, 1024, 0, s.stream>>>(losses, d[0], C(d[3]), out(*c.out));
}

// Whether the cross_entropy call of a gradient call's logits wrote the rows' log-sum-exp it is given
// (kernel_call::saved): the loss's vector kernel ran, decided from the same logits as here.
template <class C>
bool saved_by_loss(const kernel_call& c) {
  const dtype t = c.in[0]->type();
  return c.saved != nullptr && vector_ready(t, c.dims[1], {in(c, 0)}) && compute_type_is<C>(t);
}

// logits (in 0), targets (in 1), the loss's gradient (in 2) -> dlogits; given kernel_call::saved,
// the vector kernel reads the rows' log-sum-exp the loss wrote there.
template <class C>
void cross_entropy_grad(backend_state& s, const kernel_call& c) {
  const std::int64_t* d = c.dims;
  tensor_buffer& o = *c.out;
  const dtype t = o.type();
  const unsigned rows = static_cast<unsigned>(d[0]);
  if (vector_ready(t, d[1], {in(c, 0), in(o)}) && compute_type_is<C>(t)) {
    const C* lse = saved_by_loss<C>(c) ? static_cast<const C*>(c.saved->data()) : nullptr;
    return with_vector_types(t, [&]<class T, class V>() {
      if constexpr (std::is_same_v<V, C>)
        kernels::cross_entropy_grad_vector_kernel<T, C><<<rows, kernels::row_threads, 0, s.stream>>>(
            typed<T>(*c.in[0]), in(c, 1), in(c, 2), static_cast<T*>(o.data()), d[1], loss_targets_of(c),
            C(d[3]), s.bad_target(), lse);
    });
  }
  kernels::cross_entropy_grad_kernel<C><<<rows, kernels::row_threads, 0, s.stream>>>(
      in(c, 0), in(c, 1), in(c, 2), out(o), d[1], loss_targets_of(c), C(d[3]), s.bad_target());
}

}  // namespace shardgraph::cuda::detail
