#pragma once
// Elementwise kernels: a fused chain of the executor (one kernel per fusion group), the
// activations' gradients, and the optimizer's per-element work. Each thread computes whole
// elements in C (float, or double for f64 calls) and rounds its output once.
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/cuda/kernels/element_access.cuh>

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace shardgraph::cuda::kernels {

template <class C>
__device__ __forceinline__ C gelu_tanh(C x) {
  const C k = C(0.79788456080286535587989211986876), cubic = C(0.044715);
  return C(0.5) * x * (C(1) + tanh(k * (x + cubic * x * x * x)));
}
template <class C>
__device__ __forceinline__ C gelu_tanh_grad(C x) {
  const C k = C(0.79788456080286535587989211986876), cubic = C(0.044715);
  const C t = tanh(k * (x + cubic * x * x * x));
  return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * k * (C(1) + C(3) * cubic * x * x);
}
template <class C>
__device__ __forceinline__ C silu(C x) {
  return x / (C(1) + exp(-x));
}
template <class C>
__device__ __forceinline__ C silu_grad(C x) {
  const C s = C(1) / (C(1) + exp(-x));
  return s * (C(1) + x * (C(1) - s));
}
// relu and the exact (erf) GELU, as the cpu backend's (cpu/activations.hpp).
template <class C>
__device__ __forceinline__ C relu(C x) {
  return x < C(0) ? C(0) : x;
}
template <class C>
__device__ __forceinline__ C relu_grad(C x) {
  return x > C(0) ? C(1) : C(0);
}
template <class C>
__device__ __forceinline__ C gelu_erf(C x) {
  return C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752440084436210485)));
}
template <class C>
__device__ __forceinline__ C gelu_erf_grad(C x) {
  return C(0.5) * (C(1) + erf(x * C(0.70710678118654752440084436210485))) +
         x * exp(C(-0.5) * x * x) * C(0.39894228040143267793994605993438);
}
// QuickGELU x sigmoid(1.702 x) (CLIP), as the cpu backend's.
template <class C>
__device__ __forceinline__ C quick_gelu(C x) {
  return x / (C(1) + exp(C(-1.702) * x));
}
template <class C>
__device__ __forceinline__ C quick_gelu_grad(C x) {
  const C s = C(1) / (C(1) + exp(C(-1.702) * x));
  return s * (C(1) + C(1.702) * x * (C(1) - s));
}

// A chain as the executor fuses it (compute::elementwise_step), passed by value to the kernel.
struct chain_args {
  mut_ref out;
  ref operands[compute::max_chain + 1];
  compute::elementwise_step steps[compute::max_chain];
  int length = 0;
  std::int64_t numel = 0;
};

// One step of a chain on the running value v (o: the step's operand, 0 for unary steps).
template <class C>
__device__ __forceinline__ C apply_step(op kind, C v, C o) {
  switch (kind) {
    case op::add:
    case op::add_bias:
      return v + o;
    case op::mul:
      return v * o;
    case op::gelu:
      return gelu_tanh(v);
    case op::silu:
      return silu(v);
    case op::relu:
      return relu(v);
    case op::gelu_erf:
      return gelu_erf(v);
    case op::quick_gelu:
      return quick_gelu(v);
    default:
      return v;
  }
}

template <class C, class I>
__global__ void chain_kernel(chain_args a) {
  for (I i = global_thread<I>(); i < static_cast<I>(a.numel); i += grid_threads<I>()) {
    C v = load<C>(a.operands[0], i);
    for (int s = 0; s < a.length; ++s) {
      const compute::elementwise_step& st = a.steps[s];
      const C o = st.operand < 0
                      ? C(0)
                      : load<C>(a.operands[st.operand], st.period > 0 ? i % static_cast<I>(st.period) : i);
      v = apply_step(st.kind, v, o);
    }
    store<C>(a.out, i, v);
  }
}

// f'(x) * dy for Grad, the gradient op of f: gelu_grad, silu_grad, relu_grad, quick_gelu_grad or
// gelu_erf_grad.
template <class C, op Grad>
__device__ __forceinline__ C activation_grad(C x, C dy) {
  if constexpr (Grad == op::gelu_grad) return gelu_tanh_grad(x) * dy;
  else if constexpr (Grad == op::silu_grad) return silu_grad(x) * dy;
  else if constexpr (Grad == op::relu_grad) return relu_grad(x) * dy;
  else if constexpr (Grad == op::quick_gelu_grad) return quick_gelu_grad(x) * dy;
  else return gelu_erf_grad(x) * dy;
}

// out = f'(x) * dy (activation_grad).
template <class C, op Grad, class I>
__global__ void activation_grad_kernel(ref x, ref dy, mut_ref out, std::int64_t n) {
  for (I i = global_thread<I>(); i < static_cast<I>(n); i += grid_threads<I>()) {
    store<C>(out, i, activation_grad<C, Grad>(load<C>(x, i), load<C>(dy, i)));
  }
}

template <class C, class I>
__global__ void fill_kernel(mut_ref out, std::int64_t n, C value) {
  for (I i = global_thread<I>(); i < static_cast<I>(n); i += grid_threads<I>()) store<C>(out, i, value);
}

// to = alpha * to + beta * from (convert: 0, 1; scale: 0, factor with from = to; add_scaled: 1, factor).
// `to` is read only when alpha is not 0 (convert writes a buffer that may hold anything).
template <class C, class I>
__global__ void axpby_kernel(ref from, mut_ref to, std::int64_t n, C alpha, C beta) {
  for (I i = global_thread<I>(); i < static_cast<I>(n); i += grid_threads<I>()) {
    const C old = alpha == C(0) ? C(0) : load<C>(to, i);
    store<C>(to, i, alpha * old + beta * load<C>(from, i));  // NaN * 0 stays NaN, as on the cpu
  }
}

// Sum of squares accumulated in double; one atomicAdd per block into *total.
template <class C>
__global__ void sum_of_squares_kernel(ref x, std::int64_t n, double* total) {
  double sum = 0;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const double v = load<double>(x, i);
    sum += v * v;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) atomicAdd(total, sum);
}

// *bad = 1 when some element is infinite or NaN.
__global__ void nonfinite_kernel(ref x, std::int64_t n, int* bad) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    if (!isfinite(load<double>(x, i))) *bad = 1;
}

// torch.optim.AdamW on one element, in double as the cpu backend (optim/adamw.hpp adamw_element).
struct adamw_scalars {
  double beta1, beta2, eps, decay_factor, step_size, bias_correction2_sqrt;
};

// The new parameter from p, g and the moments m, v (updated in place).
__device__ __forceinline__ double adamw_element(double p, double g, double& m, double& v,
                                                const adamw_scalars& c) {
  m = c.beta1 * m + (1 - c.beta1) * g;
  v = c.beta2 * v + (1 - c.beta2) * g * g;
  const double denominator = sqrt(v) / c.bias_correction2_sqrt + c.eps;
  return p * c.decay_factor - c.step_size * m / denominator;
}

template <class T>
__global__ void adamw_kernel(T* param, const T* grad, T* m, T* v, std::int64_t n, adamw_scalars c) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    double mi = static_cast<double>(m[i]), vi = static_cast<double>(v[i]);
    param[i] =
        static_cast<T>(adamw_element(static_cast<double>(param[i]), static_cast<double>(grad[i]), mi, vi, c));
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
  }
}

// Many parameters' AdamW in one launch: a block per chunk of adamw_chunk_elements of one tensor.
// rounded (data null: none) receives the stored parameter rounded to its dtype, as convert() would.
// grad may be of any floating dtype; it is read times grad_factor, rounded to param's dtype as the
// scale kernel (axpby_kernel) would round it, so that clipping here equals scale() then adamw().
struct adamw_task {
  mut_ref param, m, v, rounded;
  ref grad;
  std::int64_t numel = 0;
  adamw_scalars scalars;
  double grad_factor = 1;
};
struct adamw_chunk {
  int task = 0;
  std::int64_t first = 0;
};
inline constexpr std::int64_t adamw_chunk_elements = 16384;

// The common task's scalars in f32, read once by each thread (adamw_f32_chunk).
struct adamw_f32_scalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, decay_factor, step_size, bias_correction2_sqrt,
      grad_factor;
  __device__ explicit adamw_f32_scalars(const adamw_task& t)
      : beta1(static_cast<float>(t.scalars.beta1)),
        one_minus_beta1(static_cast<float>(1 - t.scalars.beta1)),
        beta2(static_cast<float>(t.scalars.beta2)),
        one_minus_beta2(static_cast<float>(1 - t.scalars.beta2)),
        eps(static_cast<float>(t.scalars.eps)),
        decay_factor(static_cast<float>(t.scalars.decay_factor)),
        step_size(static_cast<float>(t.scalars.step_size)),
        bias_correction2_sqrt(static_cast<float>(t.scalars.bias_correction2_sqrt)),
        grad_factor(static_cast<float>(t.grad_factor)) {}
};

// One element of the common task below, in f32 as torch's fused AdamW updates f32 parameters (the
// cpu backend's double update rounds to within a few f32 units of it): the double update's
// divisions, square roots and conversions would make this memory-bound kernel compute-bound on an
// H200. The clipped gradient is the f32 product, as scale() rounds it. Returns the result's bf16 copy.
template <class G>
__device__ __forceinline__ __nv_bfloat16 adamw_f32_element(float& p, float& m, float& v, G grad,
                                                           const adamw_f32_scalars& c) {
  float g = static_cast<float>(grad);
  if (c.grad_factor != 1) g = c.grad_factor * g;
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * g * g;
  const float denominator = sqrtf(v) / c.bias_correction2_sqrt + c.eps;
  p = p * c.decay_factor - c.step_size * m / denominator;
  return __float2bfloat16_rn(p);
}

// The common task, f32 master, moments and gradient G (float or bf16) with a bf16 copy or none.
// Where the pointers allow, four elements a thread with 16-byte loads and stores, then the rest
// (under four elements, or all where not aligned) one a thread. The loops have fixed lengths so
// that the four-element arrays stay in registers (a loop to a runtime count puts them in local
// memory and halves the kernel's bandwidth).
template <class G>
__device__ __forceinline__ void adamw_f32_chunk(const adamw_task& t, std::int64_t first, std::int64_t end) {
  float* param = static_cast<float*>(t.param.data);
  float* m = static_cast<float*>(t.m.data);
  float* v = static_cast<float*>(t.v.data);
  const G* grad = static_cast<const G*>(t.grad.data);
  auto* rounded = static_cast<__nv_bfloat16*>(t.rounded.data);
  const adamw_f32_scalars c(t);
  const auto aligned = [](const void* p, unsigned bytes) {
    return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
  };
  const bool vectors = aligned(param, 16) && aligned(m, 16) && aligned(v, 16) &&
                       aligned(grad, 4 * sizeof(G)) && (rounded == nullptr || aligned(rounded, 8)) &&
                       first % 4 == 0;
  std::int64_t rest = first;
  if (vectors) {
    rest = first + (end - first) / 4 * 4;
    for (std::int64_t i = first + 4 * static_cast<std::int64_t>(threadIdx.x); i < rest; i += 4 * blockDim.x) {
      float p4[4], m4[4], v4[4];
      G g4[4];
      __nv_bfloat16 r4[4];
      *reinterpret_cast<float4*>(p4) = *reinterpret_cast<const float4*>(param + i);
      *reinterpret_cast<float4*>(m4) = *reinterpret_cast<const float4*>(m + i);
      *reinterpret_cast<float4*>(v4) = *reinterpret_cast<const float4*>(v + i);
      if constexpr (std::is_same_v<G, float>)
        *reinterpret_cast<float4*>(g4) = *reinterpret_cast<const float4*>(grad + i);
      else
        *reinterpret_cast<uint2*>(g4) = *reinterpret_cast<const uint2*>(grad + i);
#pragma unroll
      for (int k = 0; k < 4; ++k) r4[k] = adamw_f32_element(p4[k], m4[k], v4[k], g4[k], c);
      *reinterpret_cast<float4*>(param + i) = *reinterpret_cast<const float4*>(p4);
      *reinterpret_cast<float4*>(m + i) = *reinterpret_cast<const float4*>(m4);
      *reinterpret_cast<float4*>(v + i) = *reinterpret_cast<const float4*>(v4);
      if (rounded != nullptr) *reinterpret_cast<uint2*>(rounded + i) = *reinterpret_cast<const uint2*>(r4);
    }
  }
  for (std::int64_t i = rest + threadIdx.x; i < end; i += blockDim.x) {
    const __nv_bfloat16 r = adamw_f32_element(param[i], m[i], v[i], grad[i], c);
    if (rounded != nullptr) rounded[i] = r;
  }
}

__global__ void adamw_many_kernel(const adamw_task* tasks, const adamw_chunk* chunks) {
  const adamw_chunk chunk = chunks[blockIdx.x];
  const adamw_task& t = tasks[chunk.task];
  const std::int64_t end = min(t.numel, chunk.first + adamw_chunk_elements);
  if (t.param.type == dtype::f32 && t.m.type == dtype::f32 && t.v.type == dtype::f32 &&
      (t.rounded.data == nullptr || t.rounded.type == dtype::bf16)) {
    if (t.grad.type == dtype::f32) return adamw_f32_chunk<float>(t, chunk.first, end);
    if (t.grad.type == dtype::bf16) return adamw_f32_chunk<__nv_bfloat16>(t, chunk.first, end);
  }
  const bool float_scale = t.param.type != dtype::f64;  // scale() of an f32 sum multiplies in float
  for (std::int64_t i = chunk.first + threadIdx.x; i < end; i += blockDim.x) {
    double g = load<double>(t.grad, i);
    if (t.grad_factor != 1)
      g = float_scale ? static_cast<double>(static_cast<float>(t.grad_factor) * static_cast<float>(g))
                      : t.grad_factor * g;
    double mi = load<double>(t.m, i), vi = load<double>(t.v, i);
    store<double>(t.param, i, adamw_element(load<double>(t.param, i), g, mi, vi, t.scalars));
    store<double>(t.m, i, mi);
    store<double>(t.v, i, vi);
    if (t.rounded.data != nullptr) store<double>(t.rounded, i, load<double>(t.param, i));
  }
}

}  // namespace shardgraph::cuda::kernels
