#pragma once
// Flash attention (causal, GQA) for 16-bit q, k, v with head_dim 64, on tensor cores (mma.sync
// m16n8k16, f32 accumulators). The (seq, seq) scores never reach memory: each block keeps 128 rows
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
#include <shardgraph/cuda/kernels/element_access.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shardgraph::cuda::kernels::flash {

inline constexpr int head_dim = 64;
inline constexpr int threads = 128;  // 4 warps
// How a block covers its own side (queries, or keys for their gradients): 4 warps of M tiles of 16
// rows each, in registers. With M = 2 each fragment of the streamed side that a warp loads from
// shared memory feeds two products instead of one, at the price of registers (fewer blocks per SM)
// and of taking the streamed tiles in narrower parts. Which is faster is measured
// (bench/attention_cuda); `preferred_warp_tiles` is the choice.
template <int M>
struct tiling {
  static_assert(M == 1 || M == 2, "flash attention: 1 or 2 row tiles per warp");
  static constexpr int warp_tiles = M;
  static constexpr int warp_rows = 16 * M;
  static constexpr int block_rows = 4 * warp_rows;
  // streamed rows taken into registers at once by the forward, the query and the key gradients
  static constexpr int forward_part = M == 1 ? 64 : 32;
  static constexpr int query_gradient_part = M == 1 ? 64 : 16;
  static constexpr int key_gradient_part = M == 1 ? 64 : 16;
  // blocks an SM should hold at once (__launch_bounds__): caps the registers the compiler may take
  // for its schedule at 65536 / (128 x blocks); the key gradients need more than 170 at any M
  static constexpr int forward_blocks = M == 1 ? 3 : 2, query_gradient_blocks = M == 1 ? 3 : 2;
  static constexpr int key_gradient_blocks = 2;
};
inline constexpr int tile_rows = 64;  // a tile of the streamed side
// Shared-memory row stride in elements: 144 bytes, so the fragment loads of a warp (8 rows x 4
// pairs) fall in 32 different banks.
inline constexpr int stride = head_dim + 8;
inline constexpr int tile_elements = tile_rows * stride;

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

// The A fragments of a warp's M 16-row tiles of a shared tile (rows row + 16 m ..), one per 16
// columns of head_dim: matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15),
// (rows 8-15, cols 8-15) of each 16-column chunk, so lane l points at row l % 16, column 8 (l / 16).
template <class T, int M>
__device__ __forceinline__ void load_rows(const T* tile, int row, std::uint32_t (&a)[M][4][4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int kc = 0; kc < 4; ++kc)
      load_matrices(a[m][kc], tile + (row + 16 * m + lane % 16) * stride + kc * 16 + (lane / 16) * 8);
}

// c[m][nt] += rows_m . tile^T for the tile's first 8 NT rows as NT column tiles: (16, 64) x (64, 8 NT)
// for each of the warp's M row tiles. The B fragments of column tile nt are the tile's rows
// nt*8 .. nt*8 + 7: one ldmatrix gives those of two 16-column chunks of head_dim (lane l points at
// row nt*8 + l % 8, column 32 kp + 8 (l / 8)), and feeds all M row tiles. Each c[m][nt] adds the
// chunks in the order kc = 0 .. 3, as a loop over kc outside would.
template <class T, int M, int NT>
__device__ __forceinline__ void times_rows_transposed(const std::uint32_t (&a)[M][4][4], const T* tile,
                                                      float (&c)[M][NT][4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int kp = 0; kp < 2; ++kp) {
      std::uint32_t b[4];
      load_matrices(b, tile + (nt * 8 + lane % 8) * stride + kp * 32 + (lane / 8) * 8);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma<T>(c[m][nt], a[m][2 * kp], b[0], b[1]);
        mma<T>(c[m][nt], a[m][2 * kp + 1], b[2], b[3]);
      }
    }
}

// c[m][dt] += p[m] . tile, p[m] (16, 8 N) in C fragments (rounded to T here), the tile's first 8 N
// rows (head_dim columns). The B fragments (k = the tile's rows, n = its columns) come transposed:
// one ldmatrix.trans gives those of column tiles 2 dp and 2 dp + 1 for 16 rows (lane l points at
// row 16 kc + l % 16, column 16 dp + 8 (l / 16)), and feeds all M row tiles.
template <class T, int M, int N>
__device__ __forceinline__ void times_tile(const float (&p)[M][N][4], const T* tile, float (&c)[M][8][4]) {
  static_assert(N % 2 == 0, "times_tile: p's columns come in 16-column chunks");
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kc = 0; kc < N / 2; ++kc) {
    std::uint32_t a[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      a[m][0] = pack<T>(p[m][2 * kc][0], p[m][2 * kc][1]);
      a[m][1] = pack<T>(p[m][2 * kc][2], p[m][2 * kc][3]);
      a[m][2] = pack<T>(p[m][2 * kc + 1][0], p[m][2 * kc + 1][1]);
      a[m][3] = pack<T>(p[m][2 * kc + 1][2], p[m][2 * kc + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < 4; ++dp) {
      std::uint32_t b[4];
      load_matrices_transposed(b, tile + (kc * 16 + lane % 16) * stride + dp * 16 + (lane / 16) * 8);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma<T>(c[m][2 * dp], a[m], b[0], b[1]);
        mma<T>(c[m][2 * dp + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// Rows [first, first + Rows) of a (seq, head_dim) matrix, `pitch` elements from row to row, into a
// shared tile, zeros past seq; 16-byte loads.
template <int Rows, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* matrix, int first, int seq, int pitch) {
  for (int i = threadIdx.x; i < Rows * head_dim / 8; i += threads) {
    const int row = i / (head_dim / 8), chunk = i % (head_dim / 8);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (first + row < seq)
      v = *reinterpret_cast<const uint4*>(matrix + static_cast<std::size_t>(first + row) * pitch + chunk * 8);
    *reinterpret_cast<uint4*>(tile + row * stride + chunk * 8) = v;
  }
}

// load_tile of tile_rows rows without waiting: cp.async copies 16 bytes each into shared memory
// (zeros past seq, a source size of 0) while the block computes on the other buffer. commit()
// closes the group of copies issued so far; arrived<N>() waits until at most the N newest groups
// are still in flight.
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

// Writes 16 rows (from `row`) of C fragments times `factor`, rows past seq skipped.
template <class T>
__device__ __forceinline__ void store_rows(T* matrix, int row, int seq, int pitch, const float (&c)[8][4],
                                           float factor0, float factor1) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int half = 0; half < 2; ++half) {
    const int r = row + g + 8 * half;
    if (r >= seq) continue;
    const float f = half == 0 ? factor0 : factor1;
#pragma unroll
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

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The last streamed tile that rows [first, first + block_rows) see: causal, key tiles up to the
// diagonal.
__device__ __forceinline__ int last_tile_seen(int first, int block_rows, int seq) {
  return (min(first + block_rows, seq) - 1) / tile_rows;
}

// ---- forward: grid (query blocks, heads, batch) -------------------------------------------------

template <class T, int M>
__global__ void __launch_bounds__(threads, tiling<M>::forward_blocks)
    forward_kernel(const T* q, const T* k, const T* v, T* out, float* lse, shape s) {
  constexpr int warp_tiles = M, warp_rows = tiling<M>::warp_rows, block_rows = tiling<M>::block_rows;
  // k and v tiles in two buffers, [k0, v0, k1, v1]: one computed on, one arriving. k1 and v1 (one
  // 128-row tile) first carry the block's queries into registers.
  __shared__ alignas(16) T tiles[4 * tile_elements];
  const auto k_tile = [&](int b) { return tiles + 2 * b * tile_elements; };
  const auto v_tile = [&](int b) { return tiles + (2 * b + 1) * tile_elements; };
  const int block = gridDim.x - 1 - blockIdx.x;  // the longest rows first
  const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / (s.heads / s.kv_heads);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, warp_row = (threadIdx.x / 32) * warp_rows;
  const int first = block * block_rows, warp_first = first + warp_row;
  const int q_pitch = pitch_of(s, s.heads), kv_pitch = pitch_of(s, s.kv_heads);
  const T* km = k + matrix_offset(s, batch, s.kv_heads, kv_head);
  const T* vm = v + matrix_offset(s, batch, s.kv_heads, kv_head);

  load_tile_async(k_tile(0), km, 0, s.seq, kv_pitch);
  load_tile_async(v_tile(0), vm, 0, s.seq, kv_pitch);
  commit();
  load_tile<block_rows>(k_tile(1), q + matrix_offset(s, batch, s.heads, head), first, s.seq, q_pitch);
  __syncthreads();
  std::uint32_t qa[warp_tiles][4][4];
  load_rows(k_tile(1), warp_row, qa);
  __syncthreads();  // k1 and v1 are free again
  // rows[m][r]: the query of fragment rows g (r = 0) and g + 8 (r = 1) of the warp's row tile m
  int rows[warp_tiles][2];
  float row_max[warp_tiles][2], row_sum[warp_tiles][2], o[warp_tiles][8][4] = {};
#pragma unroll
  for (int m = 0; m < warp_tiles; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      rows[m][r] = warp_first + 16 * m + g + 8 * r;
      row_max[m][r] = -INFINITY;
      row_sum[m][r] = 0;
    }

  constexpr int part_keys = tiling<M>::forward_part;
  const int last = last_tile_seen(first, block_rows, s.seq);
  for (int kb = 0; kb <= last; ++kb) {
    const int key0 = kb * tile_rows, buffer = kb % 2;
    if (kb < last) {  // the next tiles, into the buffers read in the previous iteration
      load_tile_async(k_tile(1 - buffer), km, key0 + tile_rows, s.seq, kv_pitch);
      load_tile_async(v_tile(1 - buffer), vm, key0 + tile_rows, s.seq, kv_pitch);
    }
    commit();  // (empty in the last iteration, so that one group is always the newest)
    arrived<1>();
    __syncthreads();
    // The tile in parts of part_keys keys (fewer registers for the scores); a warp whose rows see
    // none of a part's keys (past the diagonal, or past seq) skips it.
#pragma unroll
    for (int part = 0; part < tile_rows / part_keys; ++part) {
      const int part0 = key0 + part * part_keys;
      if (part0 >= warp_first + warp_rows || warp_first >= s.seq) continue;
      const T* k_rows = k_tile(buffer) + part * part_keys * stride;
      const T* v_rows = v_tile(buffer) + part * part_keys * stride;
      float x[warp_tiles][part_keys / 8][4] = {};
      times_rows_transposed(qa, k_rows, x);
      // The mask is needed where a key may lie past one of the rows or past seq.
      const bool masked = part0 + part_keys - 1 > warp_first || part0 + part_keys > s.seq;
#pragma unroll
      for (int m = 0; m < warp_tiles; ++m) {
        float tile_max[2] = {row_max[m][0], row_max[m][1]};
#pragma unroll
        for (int nt = 0; nt < part_keys / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = part0 + nt * 8 + 2 * t + (e & 1);
            const bool visible = !masked || (key <= rows[m][e / 2] && key < s.seq);
            x[m][nt][e] = visible ? x[m][nt][e] * s.scale_log2 : -INFINITY;
            tile_max[e / 2] = fmaxf(tile_max[e / 2], x[m][nt][e]);
          }
        float offset[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float top = quad_max(tile_max[r]);
          offset[r] = top == -INFINITY ? 0.f : top;  // a row with nothing visible yet keeps zeros
          const float rescale = exp2f(row_max[m][r] - offset[r]);
          row_max[m][r] = top;
          row_sum[m][r] *= rescale;
#pragma unroll
          for (int dt = 0; dt < 8; ++dt) {
            o[m][dt][2 * r] *= rescale;
            o[m][dt][2 * r + 1] *= rescale;
          }
        }
#pragma unroll
        for (int nt = 0; nt < part_keys / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            x[m][nt][e] = exp2f(x[m][nt][e] - offset[e / 2]);
            row_sum[m][e / 2] += x[m][nt][e];
          }
      }
      times_tile(x, v_rows, o);
    }
    __syncthreads();  // this buffer is refilled in the next iteration
  }
  T* om = out + matrix_offset(s, batch, s.heads, head);
#pragma unroll
  for (int m = 0; m < warp_tiles; ++m) {
    float inverse[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(row_sum[m][r]);
      inverse[r] = 1.f / sum;
      if (lse != nullptr && t == 0 && rows[m][r] < s.seq)
        lse[(static_cast<std::size_t>(batch) * s.heads + head) * s.seq + rows[m][r]] =
            row_max[m][r] + log2f(sum);
    }
    store_rows(om, warp_first + 16 * m, s.seq, q_pitch, o[m], inverse[0], inverse[1]);
  }
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
// Each 64-key tile is taken in parts of 16 keys, so that P and dP of both row tiles of a warp
// fit in registers beside q, dout and dq.
template <class T, int M>
__global__ void __launch_bounds__(threads, tiling<M>::query_gradient_blocks)
    query_gradient_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                          const float* delta, T* dq, shape s) {
  constexpr int warp_tiles = M, warp_rows = tiling<M>::warp_rows, block_rows = tiling<M>::block_rows;
  // [k0, v0, k1, v1] as in the forward; k1 and v1 first carry the block's q, then its dout.
  __shared__ alignas(16) T tiles[4 * tile_elements];
  const auto k_tile = [&](int b) { return tiles + 2 * b * tile_elements; };
  const auto v_tile = [&](int b) { return tiles + (2 * b + 1) * tile_elements; };
  constexpr int part_keys = tiling<M>::query_gradient_part;
  const int block = gridDim.x - 1 - blockIdx.x;
  const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / (s.heads / s.kv_heads);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, warp_row = (threadIdx.x / 32) * warp_rows;
  const int first = block * block_rows, warp_first = first + warp_row;
  const int q_pitch = pitch_of(s, s.heads), kv_pitch = pitch_of(s, s.kv_heads);
  const T* km = k + matrix_offset(s, batch, s.kv_heads, kv_head);
  const T* vm = v + matrix_offset(s, batch, s.kv_heads, kv_head);

  load_tile_async(k_tile(0), km, 0, s.seq, kv_pitch);
  load_tile_async(v_tile(0), vm, 0, s.seq, kv_pitch);
  commit();
  std::uint32_t qa[warp_tiles][4][4], da[warp_tiles][4][4];
  load_tile<block_rows>(k_tile(1), q + matrix_offset(s, batch, s.heads, head), first, s.seq, q_pitch);
  __syncthreads();
  load_rows(k_tile(1), warp_row, qa);
  __syncthreads();
  load_tile<block_rows>(k_tile(1), dout + matrix_offset(s, batch, s.heads, head), first, s.seq, q_pitch);
  __syncthreads();
  load_rows(k_tile(1), warp_row, da);
  __syncthreads();  // k1 and v1 are free again
  int rows[warp_tiles][2];
  float row_lse[warp_tiles][2], row_delta[warp_tiles][2];
#pragma unroll
  for (int m = 0; m < warp_tiles; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      rows[m][r] = warp_first + 16 * m + g + 8 * r;
      const std::size_t i = (static_cast<std::size_t>(batch) * s.heads + head) * s.seq + rows[m][r];
      row_lse[m][r] = rows[m][r] < s.seq ? lse[i] : 0.f;
      row_delta[m][r] = rows[m][r] < s.seq ? delta[i] : 0.f;
    }

  float dq_acc[warp_tiles][8][4] = {};
  const int last = last_tile_seen(first, block_rows, s.seq);
  for (int kb = 0; kb <= last; ++kb) {
    const int buffer = kb % 2;
    if (kb < last) {
      load_tile_async(k_tile(1 - buffer), km, (kb + 1) * tile_rows, s.seq, kv_pitch);
      load_tile_async(v_tile(1 - buffer), vm, (kb + 1) * tile_rows, s.seq, kv_pitch);
    }
    commit();
    arrived<1>();
    __syncthreads();
    for (int part = 0; part < tile_rows / part_keys; ++part) {
      const int key0 = kb * tile_rows + part * part_keys;
      if (key0 >= warp_first + warp_rows || warp_first >= s.seq) continue;  // nothing seen
      const T* k_rows = k_tile(buffer) + part * part_keys * stride;
      const T* v_rows = v_tile(buffer) + part * part_keys * stride;
      float p[warp_tiles][part_keys / 8][4] = {}, dp[warp_tiles][part_keys / 8][4] = {};
      times_rows_transposed(qa, k_rows, p);
      times_rows_transposed(da, v_rows, dp);
      const bool masked = key0 + part_keys - 1 > warp_first || key0 + part_keys > s.seq;
#pragma unroll
      for (int m = 0; m < warp_tiles; ++m)
#pragma unroll
        for (int nt = 0; nt < part_keys / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + nt * 8 + 2 * t + (e & 1);
            const bool visible = !masked || (key <= rows[m][e / 2] && key < s.seq);
            const float prob = visible ? exp2f(p[m][nt][e] * s.scale_log2 - row_lse[m][e / 2]) : 0.f;
            p[m][nt][e] = prob * (dp[m][nt][e] - row_delta[m][e / 2]);  // dS
          }
      times_tile(p, k_rows, dq_acc);
    }
    __syncthreads();
  }
  T* dqm = dq + matrix_offset(s, batch, s.heads, head);
#pragma unroll
  for (int m = 0; m < warp_tiles; ++m)
    store_rows(dqm, warp_first + 16 * m, s.seq, q_pitch, dq_acc[m], s.scale, s.scale);
}

// dk = scale * sum of dS^T Q, dv = sum of P^T dout, over the kv head's group of query heads and the
// query tiles from this block's first key on; grid (key blocks, kv_heads, batch). Each 64-query
// tile is taken in chunks of 16 queries, so that P and dP fit in registers beside k, v, dk and dv.
template <class T, int M>
__global__ void __launch_bounds__(threads, tiling<M>::key_gradient_blocks)
    key_value_gradient_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                              const float* delta, T* dk, T* dv, shape s) {
  constexpr int warp_tiles = M, warp_rows = tiling<M>::warp_rows, block_rows = tiling<M>::block_rows;
  // q and dout tiles in two buffers, [q0, d0, q1, d1]; q1 and d1 first carry the block's k, then its v.
  __shared__ alignas(16) T tiles[4 * tile_elements];
  __shared__ float lse_tiles[2][tile_rows], delta_tiles[2][tile_rows];
  const auto q_tile = [&](int b) { return tiles + 2 * b * tile_elements; };
  const auto d_tile = [&](int b) { return tiles + (2 * b + 1) * tile_elements; };
  constexpr int chunk = tiling<M>::key_gradient_part;
  const int block = gridDim.x - 1 - blockIdx.x;
  const int kv_head = blockIdx.y, batch = blockIdx.z, group = s.heads / s.kv_heads;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, warp_row = (threadIdx.x / 32) * warp_rows;
  const int first = block * block_rows, warp_first = first + warp_row;
  // The work, in order: for each query head of the group, the query tiles from this block's first
  // key on (the block starts on a tile: block_rows is a multiple of tile_rows).
  const int first_tile = first / tile_rows;
  const int tiles_per_head = (s.seq + tile_rows - 1) / tile_rows - first_tile, items = group * tiles_per_head;
  const int q_pitch = pitch_of(s, s.heads), kv_pitch = pitch_of(s, s.kv_heads);
  // Item i's q and dout tiles (async) and its rows' lse and delta into buffer b.
  auto fetch = [&](int i, int b) {
    const int head = kv_head * group + i / tiles_per_head,
              query0 = (first_tile + i % tiles_per_head) * tile_rows;
    load_tile_async(q_tile(b), q + matrix_offset(s, batch, s.heads, head), query0, s.seq, q_pitch);
    load_tile_async(d_tile(b), dout + matrix_offset(s, batch, s.heads, head), query0, s.seq, q_pitch);
    if (threadIdx.x < tile_rows) {
      const std::size_t rows_of_head = (static_cast<std::size_t>(batch) * s.heads + head) * s.seq;
      const int row = query0 + threadIdx.x;
      lse_tiles[b][threadIdx.x] = row < s.seq ? lse[rows_of_head + row] : 0.f;
      delta_tiles[b][threadIdx.x] = row < s.seq ? delta[rows_of_head + row] : 0.f;
    }
  };

  fetch(0, 0);
  commit();
  std::uint32_t ka[warp_tiles][4][4], va[warp_tiles][4][4];
  load_tile<block_rows>(q_tile(1), k + matrix_offset(s, batch, s.kv_heads, kv_head), first, s.seq, kv_pitch);
  __syncthreads();
  load_rows(q_tile(1), warp_row, ka);
  __syncthreads();
  load_tile<block_rows>(q_tile(1), v + matrix_offset(s, batch, s.kv_heads, kv_head), first, s.seq, kv_pitch);
  __syncthreads();
  load_rows(q_tile(1), warp_row, va);
  __syncthreads();  // q1 and d1 are free again

  float dk_acc[warp_tiles][8][4] = {}, dv_acc[warp_tiles][8][4] = {};
  for (int i = 0; i < items; ++i) {
    const int buffer = i % 2, query0 = (first_tile + i % tiles_per_head) * tile_rows;
    if (i + 1 < items) fetch(i + 1, 1 - buffer);
    commit();
    arrived<1>();
    __syncthreads();
    const float* tile_lse = lse_tiles[buffer];
    const float* tile_delta = delta_tiles[buffer];
    for (int c = 0; c < tile_rows / chunk; ++c) {
      const int col0 = c * chunk, chunk_first = query0 + col0;
      // Nothing seen: the chunk's queries all come before the warp's keys, or lie past seq.
      if (chunk_first + chunk <= warp_first || warp_first >= s.seq || chunk_first >= s.seq) continue;
      const T* q_rows = q_tile(buffer) + col0 * stride;
      const T* d_rows = d_tile(buffer) + col0 * stride;
      // transposed scores: rows are this warp's keys, columns the chunk's queries
      float p[warp_tiles][chunk / 8][4] = {}, dp[warp_tiles][chunk / 8][4] = {};
      times_rows_transposed(ka, q_rows, p);
      times_rows_transposed(va, d_rows, dp);
      const bool masked = chunk_first < warp_first + warp_rows - 1 || chunk_first + chunk > s.seq;
#pragma unroll
      for (int m = 0; m < warp_tiles; ++m)
#pragma unroll
        for (int nt = 0; nt < chunk / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = col0 + nt * 8 + 2 * t + (e & 1), query = query0 + col;
            const int key = warp_first + 16 * m + g + 8 * (e / 2);
            const bool visible = !masked || (key <= query && query < s.seq);
            p[m][nt][e] = visible ? exp2f(p[m][nt][e] * s.scale_log2 - tile_lse[col]) : 0.f;
            dp[m][nt][e] = p[m][nt][e] * (dp[m][nt][e] - tile_delta[col]);  // dS^T
          }
      times_tile(p, d_rows, dv_acc);
      times_tile(dp, q_rows, dk_acc);
    }
    __syncthreads();
  }
  T* dkm = dk + matrix_offset(s, batch, s.kv_heads, kv_head);
  T* dvm = dv + matrix_offset(s, batch, s.kv_heads, kv_head);
#pragma unroll
  for (int m = 0; m < warp_tiles; ++m) {
    store_rows(dkm, warp_first + 16 * m, s.seq, kv_pitch, dk_acc[m], s.scale, s.scale);
    store_rows(dvm, warp_first + 16 * m, s.seq, kv_pitch, dv_acc[m], 1.f, 1.f);
  }
}

// ---- launches on a stream ------------------------------------------------------------------------

// Row tiles per warp (tiling) that the backend asks for: 1, measured faster on an H100 for GPT-2's
// shapes (bench/RESULTS.md, "flash attention tilings").
inline constexpr int preferred_warp_tiles = 1;

template <int M>
dim3 grid_of(const shape& s, int heads) {
  return dim3((s.seq + tiling<M>::block_rows - 1) / tiling<M>::block_rows, heads, s.batch);
}

template <class T, int M>
void forward_tiled(const T* q, const T* k, const T* v, T* out, float* lse, const shape& s,
                   cudaStream_t stream) {
  forward_kernel<T, M><<<grid_of<M>(s, s.heads), threads, 0, stream>>>(q, k, v, out, lse, s);
}

template <class T, int M>
void backward_tiled(const T* q, const T* k, const T* v, const T* dout, T* dq, T* dk, T* dv, T* out,
                    float* lse, float* delta, const shape& s, cudaStream_t stream, bool forward_kept) {
  if (!forward_kept) forward_tiled<T, M>(q, k, v, out, lse, s, stream);
  const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.heads * s.seq;
  delta_kernel<T><<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, stream>>>(out, dout, delta, s);
  query_gradient_kernel<T, M>
      <<<grid_of<M>(s, s.heads), threads, 0, stream>>>(q, k, v, dout, lse, delta, dq, s);
  key_value_gradient_kernel<T, M>
      <<<grid_of<M>(s, s.kv_heads), threads, 0, stream>>>(q, k, v, dout, lse, delta, dk, dv, s);
}

// out = softmax(q k^T * scale, causal) v; lse (nullable): (batch, heads, seq) f32. warp_tiles: 1 or 2
// (tiling).
template <class T>
void forward(const T* q, const T* k, const T* v, T* out, float* lse, const shape& s, cudaStream_t stream,
             int warp_tiles = preferred_warp_tiles) {
  if (warp_tiles == 2) return forward_tiled<T, 2>(q, k, v, out, lse, s, stream);
  forward_tiled<T, 1>(q, k, v, out, lse, s, stream);
}

// dq, dk, dv from q, k, v and dout, and the forward's out (in q's layout) and lse ((batch, heads,
// seq) f32): with `forward_kept` those the forward wrote, else the forward runs again to write them
// here. delta: (batch, heads, seq) f32 of work space.
template <class T>
void backward(const T* q, const T* k, const T* v, const T* dout, T* dq, T* dk, T* dv, T* out, float* lse,
              float* delta, const shape& s, cudaStream_t stream, bool forward_kept = false,
              int warp_tiles = preferred_warp_tiles) {
  if (warp_tiles == 2)
    return backward_tiled<T, 2>(q, k, v, dout, dq, dk, dv, out, lse, delta, s, stream, forward_kept);
  backward_tiled<T, 1>(q, k, v, dout, dq, dk, dv, out, lse, delta, s, stream, forward_kept);
}

}  // namespace shardgraph::cuda::kernels::flash
