#pragma once
// Flash attention (causal, GQA) for 16-bit q, k, v with head_dim 64, on tensor cores (mma.sync
// m16n8k16, f32 accumulators). The (seq, seq) scores never reach memory: each block keeps 64 rows
// of its queries (or keys) in registers and streams 64-row tiles of the other side through shared
// memory, with the online softmax of FlashAttention-2.
//
//   q, dq, out, dout: (batch, heads, seq, 64); k, v, dk, dv: (batch, kv_heads, seq, 64)
//   query head h reads kv head h / (heads / kv_heads)
// or, with shape::token_major, all of them (batch, seq, heads or kv_heads, 64): the layout of the
// products before split_heads and after merge_heads, read and written in place of those copies.
//
// Scores are kept in the log2 domain: x = (q . k) * scale * log2(e), so exp2 gives the softmax.
// The forward writes lse = max + log2(sum) per query row (f32, (batch, heads, seq)); the backward
// recomputes P = exp2(x - lse) from it. The backward is two kernels, one per block of queries (dq)
// and one per block of keys (dk, dv, summing the kv head's group of query heads), so that no
// gradient is summed with atomics: the results do not depend on scheduling.
//
// The cuda backend prefers cuDNN's fused attention where the build has cuDNN and the call suits it
// (cudnn_attention.hpp, the faster of the two: bench/RESULTS.md); these kernels take
// the rest (GQA, sequence lengths that are not multiples of 128, builds without cuDNN).
#include <shardgraph/cuda/kernels/element_access.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shardgraph::cuda::kernels::flash {

inline constexpr int head_dim = 64;
inline constexpr int tile_rows = 64;  // rows of a block's own side: 4 warps x 16 rows
inline constexpr int threads = 128;
// Shared-memory row stride in elements: 144 bytes, so the fragment loads of a warp (8 rows x 4
// pairs) fall in 32 different banks.
inline constexpr int stride = head_dim + 8;

struct shape {
  int batch, heads, kv_heads, seq;
  float scale;       // 1 / sqrt(head_dim)
  float scale_log2;  // scale * log2(e)
  bool token_major = false;
};

// Where head `head` of batch `batch` starts in a matrix of `heads` heads, and the elements from
// one of its rows to the next.
__host__ __device__ inline std::size_t matrix_offset(const shape& s, int batch, int heads, int head) {
  return s.token_major
             ? (static_cast<std::size_t>(batch) * s.seq * heads + head) * head_dim
             : (static_cast<std::size_t>(batch) * heads + head) * static_cast<std::size_t>(s.seq) * head_dim;
}
__host__ __device__ inline int pitch_of(const shape& s, int heads) {
  return s.token_major ? heads * head_dim : head_dim;
}

inline bool supports(dtype t, std::int64_t dim) {
  return (t == dtype::bf16 || t == dtype::f16) && dim == head_dim;
}

// ---- tensor-core fragments --------------------------------------------------------------------
// m16n8k16 (PTX ISA, "matrix fragments for mma.m16n8k16"), with g = lane / 4, t = lane % 4:
//   A (16 x 16, row): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B (16 x 8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//   C (16 x 8, f32):  c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)
// A C fragment pair of columns 16j..16j+15, packed to 16 bits, is the A fragment of those columns:
// P and dS go from one product to the next without leaving registers.

template <class T>
__device__ __forceinline__ void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                    std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <class T>
__device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
  std::uint32_t bits;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&bits, &v, sizeof bits);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&bits, &v, sizeof bits);
  }
  return bits;
}

// ldmatrix (PTX ISA, "warp-level matrix load instruction: ldmatrix"): four 8 x 8 matrices of 16-bit
// elements from shared memory in one instruction. Lanes 8i .. 8i + 7 give the addresses of matrix
// i's rows (16 bytes each, 16-byte aligned: the tiles' 144-byte row stride keeps them so, and puts
// a warp's 8 rows in 8 different groups of 4 banks); lane l = 4g + t receives in r[i] matrix i's
// elements (g, 2t) and (g, 2t + 1), or with .trans those of its transpose, (2t, g) and (2t + 1, g):
// exactly the A and B fragments of mma.m16n8k16 above, one instruction for what took 4 to 8 loads.
template <class T>
__device__ __forceinline__ void load_matrices(std::uint32_t (&r)[4], const T* row) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
template <class T>
__device__ __forceinline__ void load_matrices_transposed(std::uint32_t (&r)[4], const T* row) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// The A fragments of a warp's 16 rows (from `row`) of a tile, one per 16 columns of head_dim:
// matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15)
// of each 16-column chunk, so lane l points at row l % 16, column 8 (l / 16).
template <class T>
__device__ __forceinline__ void load_rows(const T* tile, int row, std::uint32_t (&a)[4][4]) {
  const int lane = threadIdx.x % 32;
  for (int kc = 0; kc < 4; ++kc)
    load_matrices(a[kc], tile + (row + lane % 16) * stride + kc * 16 + (lane / 16) * 8);
}

// c[nt] += rows . tile^T for the tile's 64 rows as 8 column tiles: (16, 64) x (64, 64)^T. The B
// fragments of column tile nt are the tile's rows nt*8 .. nt*8 + 7: one ldmatrix gives those of two
// 16-column chunks of head_dim (lane l points at row nt*8 + l % 8, column 32 kp + 8 (l / 8)).
// Each c[nt] adds the chunks in the order kc = 0 .. 3, as a loop over kc outside would. Only the
// column tiles [begin, end) are computed (on the diagonal the others are all masked); the rest of c
// is left as it was.
template <class T>
__device__ __forceinline__ void times_rows_transposed(const std::uint32_t (&a)[4][4], const T* tile,
                                                      float (&c)[8][4], int begin = 0, int end = 8) {
  const int lane = threadIdx.x % 32;
  for (int nt = 0; nt < 8; ++nt)
    for (int kp = 0; kp < 2; ++kp) {
      if (nt < begin || nt >= end) continue;  // uniform over the warp
      std::uint32_t b[4];
      load_matrices(b, tile + (nt * 8 + lane % 8) * stride + kp * 32 + (lane / 8) * 8);
      mma<T>(c[nt], a[2 * kp], b[0], b[1]);
      mma<T>(c[nt], a[2 * kp + 1], b[2], b[3]);
    }
}

// c[dt] += p . tile, p (16, 64) in C fragments (rounded to T here), tile (64 rows, head_dim). The B
// fragments (k = the tile's rows, n = its columns) come transposed: one ldmatrix.trans gives those of
// column tiles 2 dp and 2 dp + 1 for 16 rows (lane l points at row 16 kc + l % 16, column
// 16 dp + 8 (l / 16)). Only p's 16-column chunks [begin, end) are read: on the diagonal the others
// are zero.
template <class T>
__device__ __forceinline__ void times_tile(const float (&p)[8][4], const T* tile, float (&c)[8][4],
                                           int begin = 0, int end = 4) {
  const int lane = threadIdx.x % 32;
  for (int kc = 0; kc < 4; ++kc) {
    if (kc < begin || kc >= end) continue;  // uniform over the warp
    const std::uint32_t a[4] = {pack<T>(p[2 * kc][0], p[2 * kc][1]), pack<T>(p[2 * kc][2], p[2 * kc][3]),
                                pack<T>(p[2 * kc + 1][0], p[2 * kc + 1][1]),
                                pack<T>(p[2 * kc + 1][2], p[2 * kc + 1][3])};
    for (int dp = 0; dp < 4; ++dp) {
      std::uint32_t b[4];
      load_matrices_transposed(b, tile + (kc * 16 + lane % 16) * stride + dp * 16 + (lane / 16) * 8);
      mma<T>(c[2 * dp], a, b[0], b[1]);
      mma<T>(c[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Rows [first, first + 64) of a (seq, head_dim) matrix, `pitch` elements from row to row, into a
// shared tile, zeros past seq; 16-byte loads, 4 per thread.
template <class T>
__device__ __forceinline__ void load_tile(T* tile, const T* matrix, int first, int seq, int pitch) {
  for (int i = threadIdx.x; i < tile_rows * head_dim / 8; i += threads) {
    const int row = i / (head_dim / 8), chunk = i % (head_dim / 8);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (first + row < seq)
      v = *reinterpret_cast<const uint4*>(matrix + static_cast<std::size_t>(first + row) * pitch + chunk * 8);
    *reinterpret_cast<uint4*>(tile + row * stride + chunk * 8) = v;
  }
}

// load_tile without waiting: cp.async copies 16 bytes each into shared memory (zeros past seq, a
// source size of 0) while the block computes on the other buffer. commit() closes the group of
// copies issued so far; arrived<N>() waits until at most the N newest groups are still in flight.
template <class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* matrix, int first, int seq, int pitch) {
  for (int i = threadIdx.x; i < tile_rows * head_dim / 8; i += threads) {
    const int row = i / (head_dim / 8), chunk = i % (head_dim / 8);
    const bool inside = first + row < seq;
    const T* from = inside ? matrix + static_cast<std::size_t>(first + row) * pitch + chunk * 8 : matrix;
    const auto to = static_cast<unsigned>(__cvta_generic_to_shared(tile + row * stride + chunk * 8));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from), "r"(inside ? 16 : 0)
                 : "memory");
  }
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void arrived() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Writes a warp's 16 rows (from `row`) of C fragments times `factor`, rows past seq skipped.
template <class T>
__device__ __forceinline__ void store_rows(T* matrix, int row, int seq, int pitch, const float (&c)[8][4],
                                           float factor0, float factor1) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int half = 0; half < 2; ++half) {
    const int r = row + g + 8 * half;
    if (r >= seq) continue;
    const float f = half == 0 ? factor0 : factor1;
    for (int dt = 0; dt < 8; ++dt)
      *reinterpret_cast<std::uint32_t*>(matrix + static_cast<std::size_t>(r) * pitch + dt * 8 + 2 * t) =
          pack<T>(c[dt][2 * half] * f, c[dt][2 * half + 1] * f);
  }
}

template <class T>
__device__ __forceinline__ float to_float(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return __half2float(x);
}

// 2^x, flushing subnormal results to zero: one MUFU.EX2, where exp2f adds the steps that keep them.
// Probabilities below 2^-126 are zero in bf16 and f16 sums alike.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---- forward: grid (query blocks, heads, batch) -------------------------------------------------

// The online softmax's step to a key tile's row maxima (tile_max, this thread's part of its two
// rows): the rows' maxima become the tile's (of the quad), the row sums and o are rescaled to them,
// and offset[r] is the new maximum times scale_log2, for the tile's exponents.
__device__ __forceinline__ void raise_row_maxima(const float (&tile_max)[2], float scale_log2,
                                                 float (&row_max)[2], float (&row_sum)[2], float (&o)[8][4],
                                                 float (&offset)[2]) {
  for (int r = 0; r < 2; ++r) {
    const float m = quad_max(tile_max[r]);
    offset[r] = (m == -INFINITY ? 0.f : m) * scale_log2;  // a row with nothing visible yet keeps zeros
    const float rescale = fast_exp2(row_max[r] * scale_log2 - offset[r]);
    row_max[r] = m;
    row_sum[r] *= rescale;
    for (int dt = 0; dt < 8; ++dt) {
      o[dt][2 * r] *= rescale;
      o[dt][2 * r + 1] *= rescale;
    }
  }
}

// Four blocks an SM (128 registers a thread): 16 warps to hide the latency of each one's chain of
// products, softmax and products (three blocks at 136 registers are slower: bench/RESULTS.md).
template <class T>
__global__ void __launch_bounds__(threads, 4)
    forward_kernel(const T* q, const T* k, const T* v, T* out, float* lse, shape s) {
  __shared__ alignas(16) T q_tile[tile_rows * stride];
  __shared__ alignas(16) T k_tiles[2][tile_rows * stride];  // two buffers: one computed on, one arriving
  __shared__ alignas(16) T v_tiles[2][tile_rows * stride];
  const int block = gridDim.x - 1 - blockIdx.x;  // the longest rows first
  const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / (s.heads / s.kv_heads);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, warp_row = (threadIdx.x / 32) * 16;
  const int first = block * tile_rows;
  const int q_pitch = pitch_of(s, s.heads), kv_pitch = pitch_of(s, s.kv_heads);
  const T* qm = q + matrix_offset(s, batch, s.heads, head);
  const T* km = k + matrix_offset(s, batch, s.kv_heads, kv_head);
  const T* vm = v + matrix_offset(s, batch, s.kv_heads, kv_head);

  load_tile_async(k_tiles[0], km, 0, s.seq, kv_pitch);
  load_tile_async(v_tiles[0], vm, 0, s.seq, kv_pitch);
  commit();
  load_tile(q_tile, qm, first, s.seq, q_pitch);
  __syncthreads();
  std::uint32_t qa[4][4];
  load_rows(q_tile, warp_row, qa);
  const int rows[2] = {first + warp_row + g, first + warp_row + g + 8};

  // Row maxima are of the raw scores q . k; the scale goes into the exponent's one multiply-add.
  float o[8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0, 0};
  const int warp = warp_row / 16;
  for (int kb = 0; kb <= block; ++kb) {  // causal: key tiles up to the diagonal
    const int key0 = kb * tile_rows, buffer = kb % 2;
    if (kb < block) {  // the next tiles, into the buffers read in the previous iteration
      load_tile_async(k_tiles[1 - buffer], km, key0 + tile_rows, s.seq, kv_pitch);
      load_tile_async(v_tiles[1 - buffer], vm, key0 + tile_rows, s.seq, kv_pitch);
    }
    commit();  // (empty in the last iteration, so that one group is always the newest)
    arrived<1>();
    __syncthreads();
    const T* k_tile = k_tiles[buffer];
    const T* v_tile = v_tiles[buffer];
    // Only the diagonal tile has keys after some of this block's rows (and, in the last block,
    // keys past seq): it alone is masked, and there this warp's rows see none of the keys past its
    // own 16, so those column tiles (8 keys) and chunks of P (16 keys) are skipped.
    const bool diagonal = kb == block;
    const int column_tiles = diagonal ? 2 * warp + 2 : 8;
    float x[8][4] = {};
    times_rows_transposed(qa, k_tile, x, 0, column_tiles);
    float tile_max[2] = {row_max[0], row_max[1]};
    for (int nt = 0; nt < 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        if (diagonal) {
          const int key = key0 + nt * 8 + 2 * t + (e & 1);
          if (key > rows[e / 2] || key >= s.seq) x[nt][e] = -INFINITY;
        }
        tile_max[e / 2] = fmaxf(tile_max[e / 2], x[nt][e]);
      }
    float offset[2];
    raise_row_maxima(tile_max, s.scale_log2, row_max, row_sum, o, offset);
    for (int nt = 0; nt < 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        x[nt][e] = fast_exp2(fmaf(x[nt][e], s.scale_log2, -offset[e / 2]));
        row_sum[e / 2] += x[nt][e];
      }
    times_tile(x, v_tile, o, 0, diagonal ? warp + 1 : 4);
    __syncthreads();  // this buffer is refilled in the next iteration
  }
  float inverse[2];
  for (int r = 0; r < 2; ++r) {
    row_sum[r] = quad_sum(row_sum[r]);
    inverse[r] = 1.f / row_sum[r];
    if (lse != nullptr && t == 0 && rows[r] < s.seq)
      lse[(static_cast<std::size_t>(batch) * s.heads + head) * s.seq + rows[r]] =
          row_max[r] * s.scale_log2 + log2f(row_sum[r]);
  }
  store_rows(out + matrix_offset(s, batch, s.heads, head), first + warp_row, s.seq, q_pitch, o, inverse[0],
             inverse[1]);
}

// ---- backward -----------------------------------------------------------------------------------

// delta[row] = dout[row] . out[row] over head_dim, f32, rows in lse's order (batch, heads, seq):
// one warp per row, two elements per lane.
template <class T>
__global__ void delta_kernel(const T* out, const T* dout, float* delta, shape s) {
  const std::int64_t row = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (row >= static_cast<std::int64_t>(s.batch) * s.heads * s.seq) return;
  const int lane = threadIdx.x % 32, position = static_cast<int>(row % s.seq);
  const int head = static_cast<int>(row / s.seq % s.heads), batch = static_cast<int>(row / s.seq / s.heads);
  const std::size_t i = matrix_offset(s, batch, s.heads, head) +
                        static_cast<std::size_t>(position) * pitch_of(s, s.heads) + 2 * lane;
  float d = to_float(out[i]) * to_float(dout[i]) + to_float(out[i + 1]) * to_float(dout[i + 1]);
  for (int w = 16; w > 0; w /= 2) d += __shfl_xor_sync(0xffffffffu, d, w);
  if (lane == 0) delta[row] = d;
}

// dq = scale * sum over key tiles of dS K, dS = P (dP - delta), dP = dout V^T; grid as the forward.
template <class T>
__global__ void __launch_bounds__(threads)
    query_gradient_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                          const float* delta, T* dq, shape s) {
  __shared__ alignas(16) T k_tiles[2][tile_rows * stride];
  __shared__ alignas(16) T v_tiles[2][tile_rows * stride];
  const int block = gridDim.x - 1 - blockIdx.x;
  const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / (s.heads / s.kv_heads);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, warp_row = (threadIdx.x / 32) * 16;
  const int first = block * tile_rows;
  const int q_pitch = pitch_of(s, s.heads), kv_pitch = pitch_of(s, s.kv_heads);
  const T* km = k + matrix_offset(s, batch, s.kv_heads, kv_head);
  const T* vm = v + matrix_offset(s, batch, s.kv_heads, kv_head);

  // The first key tiles on their way; q and dout's rows through the second buffers, into registers.
  load_tile_async(k_tiles[0], km, 0, s.seq, kv_pitch);
  load_tile_async(v_tiles[0], vm, 0, s.seq, kv_pitch);
  commit();
  std::uint32_t qa[4][4], da[4][4];
  load_tile(k_tiles[1], q + matrix_offset(s, batch, s.heads, head), first, s.seq, q_pitch);
  load_tile(v_tiles[1], dout + matrix_offset(s, batch, s.heads, head), first, s.seq, q_pitch);
  __syncthreads();
  load_rows(k_tiles[1], warp_row, qa);
  load_rows(v_tiles[1], warp_row, da);
  __syncthreads();  // the second buffers are free again
  const int rows[2] = {first + warp_row + g, first + warp_row + g + 8};
  float row_lse[2], row_delta[2];
  for (int r = 0; r < 2; ++r) {
    const std::size_t i = (static_cast<std::size_t>(batch) * s.heads + head) * s.seq + rows[r];
    row_lse[r] = rows[r] < s.seq ? lse[i] : 0.f;
    row_delta[r] = rows[r] < s.seq ? delta[i] : 0.f;
  }

  float dq_acc[8][4] = {};
  for (int kb = 0; kb <= block; ++kb) {
    const int key0 = kb * tile_rows, buffer = kb % 2;
    if (kb < block) {
      load_tile_async(k_tiles[1 - buffer], km, key0 + tile_rows, s.seq, kv_pitch);
      load_tile_async(v_tiles[1 - buffer], vm, key0 + tile_rows, s.seq, kv_pitch);
    }
    commit();
    arrived<1>();
    __syncthreads();
    const T* k_tile = k_tiles[buffer];
    const T* v_tile = v_tiles[buffer];
    float p[8][4] = {}, dp[8][4] = {};
    times_rows_transposed(qa, k_tile, p);
    times_rows_transposed(da, v_tile, dp);
    for (int nt = 0; nt < 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt * 8 + 2 * t + (e & 1);
        const bool visible = key <= rows[e / 2] && key < s.seq;
        const float prob = visible ? exp2f(p[nt][e] * s.scale_log2 - row_lse[e / 2]) : 0.f;
        p[nt][e] = prob * (dp[nt][e] - row_delta[e / 2]);  // dS
      }
    times_tile(p, k_tile, dq_acc);
    __syncthreads();
  }
  store_rows(dq + matrix_offset(s, batch, s.heads, head), first + warp_row, s.seq, q_pitch, dq_acc, s.scale,
             s.scale);
}

// dk = scale * sum of dS^T Q, dv = sum of P^T dout, over the kv head's group of query heads and the
// query tiles at or after this key tile; grid (key blocks, kv_heads, batch).
template <class T>
__global__ void __launch_bounds__(threads)
    key_value_gradient_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                              const float* delta, T* dk, T* dv, shape s) {
  __shared__ alignas(16) T q_tiles[2][tile_rows * stride];
  __shared__ alignas(16) T d_tiles[2][tile_rows * stride];
  __shared__ float lse_tiles[2][tile_rows], delta_tiles[2][tile_rows];
  const int block = gridDim.x - 1 - blockIdx.x;
  const int kv_head = blockIdx.y, batch = blockIdx.z, group = s.heads / s.kv_heads;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, warp_row = (threadIdx.x / 32) * 16;
  const int first = block * tile_rows;
  // The work, in order: for each query head of the group, the query tiles from the diagonal on.
  const int tiles_per_head = (s.seq + tile_rows - 1) / tile_rows - block, items = group * tiles_per_head;
  const int q_pitch = pitch_of(s, s.heads), kv_pitch = pitch_of(s, s.kv_heads);
  // Item i's q and dout tiles (async) and its rows' lse and delta into buffer b.
  auto fetch = [&](int i, int b) {
    const int head = kv_head * group + i / tiles_per_head, query0 = (block + i % tiles_per_head) * tile_rows;
    load_tile_async(q_tiles[b], q + matrix_offset(s, batch, s.heads, head), query0, s.seq, q_pitch);
    load_tile_async(d_tiles[b], dout + matrix_offset(s, batch, s.heads, head), query0, s.seq, q_pitch);
    if (threadIdx.x < tile_rows) {
      const std::size_t rows_of_head = (static_cast<std::size_t>(batch) * s.heads + head) * s.seq;
      const int row = query0 + threadIdx.x;
      lse_tiles[b][threadIdx.x] = row < s.seq ? lse[rows_of_head + row] : 0.f;
      delta_tiles[b][threadIdx.x] = row < s.seq ? delta[rows_of_head + row] : 0.f;
    }
  };

  // The first item on its way; k and v's rows through the second buffers, into registers.
  fetch(0, 0);
  commit();
  std::uint32_t ka[4][4], va[4][4];
  load_tile(q_tiles[1], k + matrix_offset(s, batch, s.kv_heads, kv_head), first, s.seq, kv_pitch);
  load_tile(d_tiles[1], v + matrix_offset(s, batch, s.kv_heads, kv_head), first, s.seq, kv_pitch);
  __syncthreads();
  load_rows(q_tiles[1], warp_row, ka);
  load_rows(d_tiles[1], warp_row, va);
  __syncthreads();
  const int keys[2] = {first + warp_row + g, first + warp_row + g + 8};

  float dk_acc[8][4] = {}, dv_acc[8][4] = {};
  for (int i = 0; i < items; ++i) {
    const int buffer = i % 2, query0 = (block + i % tiles_per_head) * tile_rows;
    if (i + 1 < items) fetch(i + 1, 1 - buffer);
    commit();
    arrived<1>();
    __syncthreads();
    const T* q_tile = q_tiles[buffer];
    const T* d_tile = d_tiles[buffer];
    const float* tile_lse = lse_tiles[buffer];
    const float* tile_delta = delta_tiles[buffer];
    // transposed scores: rows are this warp's keys, columns the tile's queries
    float p[8][4] = {}, dp[8][4] = {};
    times_rows_transposed(ka, q_tile, p);
    times_rows_transposed(va, d_tile, dp);
    for (int nt = 0; nt < 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * t + (e & 1), query = query0 + col;
        const bool visible = keys[e / 2] <= query && query < s.seq;
        p[nt][e] = visible ? exp2f(p[nt][e] * s.scale_log2 - tile_lse[col]) : 0.f;
        dp[nt][e] = p[nt][e] * (dp[nt][e] - tile_delta[col]);  // dS^T
      }
    times_tile(p, d_tile, dv_acc);
    times_tile(dp, q_tile, dk_acc);
    __syncthreads();
  }
  store_rows(dk + matrix_offset(s, batch, s.kv_heads, kv_head), first + warp_row, s.seq, kv_pitch, dk_acc,
             s.scale, s.scale);
  store_rows(dv + matrix_offset(s, batch, s.kv_heads, kv_head), first + warp_row, s.seq, kv_pitch, dv_acc,
             1.f, 1.f);
}

// ---- launches on a stream ------------------------------------------------------------------------

inline dim3 query_grid(const shape& s) { return dim3((s.seq + tile_rows - 1) / tile_rows, s.heads, s.batch); }

// out = softmax(q k^T * scale, causal) v; lse (nullable): (batch, heads, seq) f32.
template <class T>
void forward(const T* q, const T* k, const T* v, T* out, float* lse, const shape& s, cudaStream_t stream) {
  forward_kernel<T><<<query_grid(s), threads, 0, stream>>>(q, k, v, out, lse, s);
}

// dq, dk, dv from q, k, v and dout, and the forward's out (in q's layout) and lse ((batch, heads,
// seq) f32): with `forward_kept` those the forward wrote, else the forward runs again to write them
// here. delta: (batch, heads, seq) f32 of work space.
template <class T>
void backward(const T* q, const T* k, const T* v, const T* dout, T* dq, T* dk, T* dv, T* out, float* lse,
              float* delta, const shape& s, cudaStream_t stream, bool forward_kept = false) {
  if (!forward_kept) forward<T>(q, k, v, out, lse, s, stream);
  const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.heads * s.seq;
  delta_kernel<T><<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, stream>>>(out, dout, delta, s);
  query_gradient_kernel<T><<<query_grid(s), threads, 0, stream>>>(q, k, v, dout, lse, delta, dq, s);
  const dim3 key_grid((s.seq + tile_rows - 1) / tile_rows, s.kv_heads, s.batch);
  key_value_gradient_kernel<T><<<key_grid, threads, 0, stream>>>(q, k, v, dout, lse, delta, dk, dv, s);
}

}  // namespace shardgraph::cuda::kernels::flash
