// cuda::backend: the kernel contract (tests/compute/kernel_contract_cases.hpp), then against
// cpu::backend, the numerical reference (a call of a fused kind lowered onto its kernels by the core,
// compute/lower_fused.hpp): every op the cuda backend runs, built
// as the same compute::kernel_call for both backends on the same deterministic inputs, in f64, f32
// and bf16 (16-bit inputs and output; both backends widen to f32 and round the output once), and the
// TrainingBackend operations (the optimizer's elementwise work, the block moves of collectives).
// Each check is max |cuda - cpu| / max |cpu| within the op's tolerance (see `tolerance` below); an
// output element a kernel leaves unwritten reads as NaN and fails. A GPU test: skipped without one.

// The cpu backend is host code: Eigen's __host__ __device__ annotations, which nvcc would check on
// every product the reference instantiates (attention's triangular ones included), are not wanted.
#define EIGEN_NO_CUDA 1

#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/core/dtype.hpp>
#include <shardgraph/core/half_types.hpp>
#include <shardgraph/cpu/backend.hpp>
#include <shardgraph/cuda/backend.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "catch.hpp"
#include "compute/kernel_contract.hpp"
#include "support/cpu_fused_calls.hpp"

namespace sg = shardgraph;
using sg::dtype;
using sg::op;

namespace {

using namespace kernel_contract;

// (rows, cols) softmax of each row, in double: a realistic y for softmax_grad.
std::vector<double> softmax_rows(std::vector<double> x, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t i = 0; i < rows; ++i) {
    double* row = x.data() + i * cols;
    const double largest = *std::max_element(row, row + cols);
    double sum = 0;
    for (std::int64_t j = 0; j < cols; ++j) sum += (row[j] = std::exp(row[j] - largest));
    for (std::int64_t j = 0; j < cols; ++j) row[j] /= sum;
  }
  return x;
}

// The reference and the backend under test. Copies of a cuda backend share its stream and scratch,
// so each test case makes its own.
struct both_backends {
  sg::testing::cpu_fused_calls cpu;  // fused kinds lowered onto the reference kernels
  sg::cuda::backend cuda;

  // max |cuda - cpu| / max |cpu| of one kernel call (run_on) described by `describe`.
  template <class Describe>
  double difference(dtype out_type, std::int64_t out_numel, const std::vector<host_tensor>& inputs,
                    Describe&& describe) {
    const std::vector<double> want = run_on(cpu, out_type, out_numel, inputs, describe);
    const std::vector<double> got = run_on(cuda, out_type, out_numel, inputs, describe);
    return relative_difference(got, want);
  }

  // The same for what `work(backend)` returns (the values of buffers it made and changed).
  template <class Work>
  double difference_of(Work&& work) {
    const auto want = work(cpu);
    const auto got = work(cuda);
    return relative_difference(got, want);
  }
};

// ---- tolerances -----------------------------------------------------------------------------------

// The largest max |cuda - cpu| / max |cpu| an op may show, by dtype.
struct tolerance {
  double f64, f32, bf16;
  double of(dtype t) const { return t == dtype::f64 ? f64 : t == dtype::f32 ? f32 : bf16; }
};

// Moves and copies: the same bits.
constexpr tolerance exact{0, 0, 0};
// A few roundings per element, or short row sums (norms, softmax). bf16: the two f32 results round
// to bf16 at most one unit apart, 2^-8 to 2^-7 of the element.
constexpr tolerance elementwise{1e-12, 1e-5, 2e-2};
// GEMMs and sums over rows: cuBLASLt, the column-sum kernels and atomics add in another order than
// Eigen and the cpu loops.
constexpr tolerance long_sums{1e-10, 1e-5, 2e-2};
// Attention: softmax between two GEMMs, and in the gradient dS = P (dP - rowsum(dP P)) subtracts
// nearly equal numbers before two more GEMMs, so f32 summation-order differences grow ~5x. In bf16 the
// cuda backend rounds P and dS to bf16 between its GEMMs, where the cpu keeps them in f32.
constexpr tolerance attention_tolerance{1e-10, 5e-5, 3e-2};
// The cross-entropy loss: under bf16 logits the loss is f32 on both (not rounded to bf16), so f32's.
constexpr tolerance loss_tolerance{1e-10, 1e-5, 1e-5};

constexpr std::array<dtype, 3> every_dtype{dtype::f64, dtype::f32, dtype::bf16};
// For GEMM shapes that 16-bit cuBLASLt kernels may not take (dimensions not multiples of 8).
constexpr std::array<dtype, 2> wide_dtypes{dtype::f64, dtype::f32};

// One SECTION per dtype, named "<what> <dtype>", checking compare(dtype) <= the tolerance.
template <class Compare>
void in_each_dtype(const std::string& what, tolerance allowed, Compare&& compare,
                   std::span<const dtype> types = every_dtype) {
  for (const dtype t : types) {
    SECTION(what + " " + std::string(sg::dtype_name(t))) {
      const double difference = compare(t);
      const double limit = allowed.of(t);
      CAPTURE(difference, limit);
      CHECK(difference <= limit);
    }
  }
}

// The sizes of one attention call: q (batch, heads, seq, head_dim), k and v (batch, kv_heads, seq,
// head_dim). seq is odd in f64 and f32, a multiple of 8 in bf16 (16-bit GEMM strides), unless the
// shape names its own: head_dim 64 runs bf16 through flash attention, which takes any seq: 150 is
// two 64-row tiles and a partial one, so the causal mask, the diagonal tiles and the rows past seq
// are all exercised; 40 is less than one tile; 300 is five tiles, the key gradients over several
// query tiles each. The last two run on cuDNN's fused attention where the build has cuDNN
// (SHARDGRAPH_CUDA_CUDNN; shardgraph's own kernels with SHARDGRAPH_CUDA_ATTENTION=flash).
struct attention_shape {
  std::string name;
  std::int64_t batch, heads, kv_heads, head_dim;
  std::int64_t fixed_seq = 0;
  std::int64_t seq(dtype t) const {
    if (fixed_seq > 0) return fixed_seq;
    return t == dtype::bf16 ? 16 : 11;
  }
  std::int64_t q_numel(dtype t) const { return batch * heads * seq(t) * head_dim; }
  std::int64_t kv_numel(dtype t) const { return batch * kv_heads * seq(t) * head_dim; }
};

const std::vector<attention_shape>& attention_shapes() {
  static const std::vector<attention_shape> shapes{
      {"MHA (heads 4, kv_heads 4)", 2, 4, 4, 16},
      {"GQA (heads 4, kv_heads 2)", 2, 4, 2, 8},
      {"MQA (heads 4, kv_heads 1)", 2, 4, 1, 16},
      {"flash MHA (heads 2, head_dim 64, seq 150)", 2, 2, 2, 64, 150},
      {"flash GQA (heads 4, kv_heads 2, head_dim 64, seq 131)", 1, 4, 2, 64, 131},
      {"flash MHA (heads 1, head_dim 64, seq 40)", 2, 1, 1, 64, 40},
      {"flash GQA (heads 2, kv_heads 1, head_dim 64, seq 300)", 1, 2, 1, 64, 300},
      // seq a multiple of 128, no GQA: cuDNN's fused attention where the build has cuDNN
      {"cuDNN MHA (heads 3, head_dim 64, seq 256)", 2, 3, 3, 64, 256},
      {"cuDNN MHA (heads 2, head_dim 128, seq 128)", 1, 2, 2, 128, 128}};
  return shapes;
}

// q, k, v and the output's gradient, in [-1.5, 1.5]: scores of a few units, a softmax far from uniform.
std::vector<host_tensor> attention_inputs(const attention_shape& a, dtype t, std::uint32_t seed = 1) {
  return {random_tensor(t, a.q_numel(t), seed, -1.5, 1.5),
          random_tensor(t, a.kv_numel(t), seed + 1, -1.5, 1.5),
          random_tensor(t, a.kv_numel(t), seed + 2, -1.5, 1.5), random_tensor(t, a.q_numel(t), seed + 3)};
}

// Targets in [0, vocab) with one ignored row (-100).
std::vector<std::int64_t> targets_for(std::int64_t rows, std::int64_t vocab) {
  std::vector<std::int64_t> targets(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) targets[static_cast<std::size_t>(i)] = (i * 37 + 11) % vocab;
  targets[2] = -100;
  return targets;
}

// Token ids for a vocab-parallel table of rows [8, 19): ids from 0 to 29 (many outside the range),
// every id repeated, and id 12 at the first three tokens.
std::vector<std::int64_t> embedding_ids(std::int64_t tokens) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(tokens));
  for (std::int64_t i = 0; i < tokens; ++i) ids[static_cast<std::size_t>(i)] = (i * 7 + 3) % 30;
  ids[0] = ids[1] = ids[2] = 12;
  return ids;
}

// The unscaled rope, and yarn's (a ramp between scaled and unscaled frequencies over the pairs,
// cos and sin times 0.1 ln 4 + 1).
std::vector<sg::rope_scaling> rope_scalings() {
  return {{}, {.type = sg::rope_type::yarn, .factor = 4, .original_max_positions = 64}};
}

}  // namespace

namespace {

// The kernel contract's fixture: the cuda backend. f64: cuBLASLt and the row kernels add in another
// order than the references' loops; f32: attention's bound against the cpu backend, plus the cpu's own.
struct cuda_fixture {
  using backend = sg::cuda::backend;
  static backend make() { return backend(); }
  static constexpr double f64 = 1e-10, f32 = 5e-5;
};

}  // namespace

using kernel_backends = std::tuple<cuda_fixture>;
#include "compute/kernel_contract_cases.hpp"
#include "compute/combining_kernel_cases.hpp"
#include "compute/kernel_contract_convolution_cases.hpp"

// ---- forward ops ----------------------------------------------------------------------------------

TEST_CASE("cuda backend: embedding and position_embedding match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  const std::int64_t tokens = 37, cols = 24;
  in_each_dtype("embedding, whole table", exact, [&](dtype t) {
    const std::int64_t table_rows = 30;  // ids (37) into table (30, 24): out (37, 24)
    return b.difference(t, tokens * cols,
                        {id_tensor(embedding_ids(tokens)), random_tensor(t, table_rows * cols, 1)},
                        [&](auto& call, auto&) {
                          call.kind = op::embedding;
                          set_dims(call, {tokens, table_rows, cols, 0});
                        });
  });
  in_each_dtype("embedding, vocab-parallel rows [8, 19)", exact, [&](dtype t) {
    const std::int64_t table_rows = 11, row_offset = 8;  // ids outside [8, 19) give zero rows
    return b.difference(t, tokens * cols,
                        {id_tensor(embedding_ids(tokens)), random_tensor(t, table_rows * cols, 2)},
                        [&](auto& call, auto&) {
                          call.kind = op::embedding;
                          set_dims(call, {tokens, table_rows, cols, row_offset});
                        });
  });
  // Rows of whole 16-byte vectors (24 and 40 wide) run the vector kernels; 21 and 13 wide the
  // element kernels.
  in_each_dtype("embedding, rows of 21", exact, [&](dtype t) {
    const std::int64_t table_rows = 30, odd = 21;
    return b.difference(t, tokens * odd,
                        {id_tensor(embedding_ids(tokens)), random_tensor(t, table_rows * odd, 5)},
                        [&](auto& call, auto&) {
                          call.kind = op::embedding;
                          set_dims(call, {tokens, table_rows, odd, 0});
                        });
  });
  for (const std::int64_t width : {40, 13})
    in_each_dtype("position_embedding, rows of " + std::to_string(width), elementwise, [&](dtype t) {
      const std::int64_t batch = 3, seq = 7, positions = 9;  // x (3, 7, width) + table (9, width)[t]
      return b.difference(t, batch * seq * width,
                          {random_tensor(t, batch * seq * width, 3), random_tensor(t, positions * width, 4)},
                          [&](auto& call, auto&) {
                            call.kind = op::position_embedding;
                            set_dims(call, {batch, seq, width});
                          });
    });
}

TEST_CASE("cuda backend: linear and matmul match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  struct gemm_size {
    std::string name;
    std::int64_t m, k, n;
    std::span<const dtype> types;
  };
  // k and n multiples of 8 for the 16-bit GEMMs; the odd shape only in f64 and f32.
  const std::vector<gemm_size> sizes{{"(37, 24) . (24, 40)", 37, 24, 40, every_dtype},
                                     {"(5, 13) . (13, 11)", 5, 13, 11, wide_dtypes}};
  for (const gemm_size& s : sizes)
    for (const bool transposed : {false, true}) {
      const std::string name = "linear " + s.name + (transposed ? ", w stored (n, k)" : ", w stored (k, n)");
      in_each_dtype(
          name, long_sums,
          [&](dtype t) {
            return b.difference(t, s.m * s.n,
                                {random_tensor(t, s.m * s.k, 1), random_tensor(t, s.k * s.n, 2)},
                                [&](auto& call, auto&) {
                                  call.kind = op::linear;
                                  set_dims(call, {s.m, s.k, s.n});
                                  call.transpose_b = transposed;
                                });
          },
          s.types);
    }
  struct matmul_size {
    std::string name;
    std::int64_t batch, m, k, n;
    std::span<const dtype> types;
  };
  const std::vector<matmul_size> batched{{"3 x (13, 16) . (16, 24)", 3, 13, 16, 24, every_dtype},
                                         {"2 x (5, 7) . (7, 3)", 2, 5, 7, 3, wide_dtypes}};
  for (const matmul_size& s : batched)
    in_each_dtype(
        "matmul " + s.name, long_sums,
        [&](dtype t) {
          return b.difference(
              t, s.batch * s.m * s.n,
              {random_tensor(t, s.batch * s.m * s.k, 3), random_tensor(t, s.batch * s.k * s.n, 4)},
              [&](auto& call, auto&) {
                call.kind = op::matmul;
                set_dims(call, {s.batch, s.m, s.k, s.n});
              });
        },
        s.types);
}

TEST_CASE("cuda backend: a linear's epilogues and a norm gradient's add match the cpu backend",
          "[cuda][gpu]") {
  both_backends b;
  using sg::compute::product_epilogue;
  const std::int64_t m = 37, k = 24, n = 40;  // k and n multiples of 8 for the 16-bit GEMMs
  struct variant {
    std::string name;
    product_epilogue epilogue;
    bool bias, side;
  };
  // in0 = x (m, k), in1 = w (k, n), in2 = bias (n), in3 = the side (m, n): written by gelu (only the
  // output is compared here; the training test reads it through gelu_grad), read by the others.
  for (const variant& v : {variant{"gelu", product_epilogue::gelu, true, false},
                           variant{"gelu keeping its input", product_epilogue::gelu, true, true},
                           variant{"gelu without bias", product_epilogue::gelu, false, false},
                           variant{"gelu_grad", product_epilogue::gelu_grad, false, true},
                           variant{"add", product_epilogue::add, true, true},
                           variant{"add without bias", product_epilogue::add, false, true}})
    in_each_dtype("linear then " + v.name, long_sums, [&](dtype t) {
      return b.difference(t, m * n,
                          {random_tensor(t, m * k, 1), random_tensor(t, k * n, 2), random_tensor(t, n, 3),
                           random_tensor(t, m * n, 4)},
                          [&](auto& call, auto& in) {
                            call.kind = op::linear;
                            set_dims(call, {m, k, n});
                            call.in[2] = call.in[3] = nullptr;
                            if (v.bias) call.bias = &in[2];
                            call.epilogue = v.epilogue;
                            if (v.side) call.side = &in[3];
                          });
    });
  // (37, 96): the warp-per-row kernel adds it; (7, 100) in bf16: a block per row, then the add.
  struct row_size {
    std::int64_t rows, cols;
  };
  for (const row_size size : {row_size{37, 96}, row_size{7, 100}})
    for (const op kind : {op::layer_norm_grad_x, op::rms_norm_grad_x})
      in_each_dtype(std::string(sg::op_name(kind)) + " then add (" + std::to_string(size.rows) + ", " +
                        std::to_string(size.cols) + ")",
                    elementwise, [&](dtype t) {
                      const std::int64_t rows = size.rows, cols = size.cols, numel = rows * cols;
                      return b.difference(
                          t, numel,
                          {random_tensor(t, numel, 1, -1, 3), random_tensor(t, cols, 2, 0.5, 1.5),
                           random_tensor(t, numel, 3), random_tensor(t, numel, 4)},
                          [&](auto& call, auto& in) {
                            call.kind = kind;
                            set_dims(call, {rows, cols});
                            call.scalar = 1e-5;
                            call.in[3] = nullptr;
                            call.epilogue = product_epilogue::add;
                            call.side = &in[3];
                          });
                    });
}

TEST_CASE("cuda backend: elementwise chains match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  // (5, 40) and a bias (40): whole 16-byte vectors in every dtype (the vector kernels); (5, 41): the
  // scalar kernels.
  for (const std::int64_t cols : {std::int64_t{40}, std::int64_t{41}}) {
    const std::int64_t rows = 5, numel = rows * cols;
    const std::string size = " (5, " + std::to_string(cols) + ")";
    // A chain over operands[0..count), as the executor fuses it (compute::elementwise_step).
    auto chain = [](std::vector<sg::compute::elementwise_step> steps, int operand_count,
                    std::int64_t elements) {
      return [steps, operand_count, elements](auto& call, auto& in) {
        for (const sg::compute::elementwise_step& s : steps) call.chain[call.chain_length++] = s;
        for (int k = 0; k < operand_count; ++k) call.operands[k] = &in[static_cast<std::size_t>(k)];
        call.operand_count = operand_count;
        call.kind = call.chain[call.chain_length - 1].kind;  // the op of the chain's last node
        call.dims[0] = elements;
      };
    };
    in_each_dtype("add" + size, elementwise, [&](dtype t) {
      return b.difference(t, numel, {random_tensor(t, numel, 1), random_tensor(t, numel, 2)},
                          chain({{op::add, 1, 0}}, 2, numel));
    });
    in_each_dtype("mul" + size, elementwise, [&](dtype t) {
      return b.difference(t, numel, {random_tensor(t, numel, 3), random_tensor(t, numel, 4)},
                          chain({{op::mul, 1, 0}}, 2, numel));
    });
    in_each_dtype("add_bias, the bias read with period 40" + size, elementwise, [&](dtype t) {
      return b.difference(t, numel, {random_tensor(t, numel, 5), random_tensor(t, cols, 6)},
                          chain({{op::add_bias, 1, cols}}, 2, numel));
    });
    in_each_dtype("gelu" + size, elementwise, [&](dtype t) {
      return b.difference(t, numel, {random_tensor(t, numel, 7, -4, 4)},
                          chain({{op::gelu, -1, 0}}, 1, numel));
    });
    in_each_dtype("silu" + size, elementwise, [&](dtype t) {
      return b.difference(t, numel, {random_tensor(t, numel, 8, -4, 4)},
                          chain({{op::silu, -1, 0}}, 1, numel));
    });
    for (const op kind : {op::relu, op::gelu_erf, op::quick_gelu})
      in_each_dtype(std::string(sg::op_name(kind)) + size, elementwise, [&](dtype t) {
        return b.difference(t, numel, {random_tensor(t, numel, 13, -4, 4)}, chain({{kind, -1, 0}}, 1, numel));
      });
    // silu((gelu(x + bias) * gate) + residual): five steps, three operands after the start.
    in_each_dtype("chain add_bias, gelu, mul, add, silu" + size, elementwise, [&](dtype t) {
      return b.difference(t, numel,
                          {random_tensor(t, numel, 9, -2, 2), random_tensor(t, cols, 10),
                           random_tensor(t, numel, 11), random_tensor(t, numel, 12)},
                          chain({{op::add_bias, 1, cols},
                                 {op::gelu, -1, 0},
                                 {op::mul, 2, 0},
                                 {op::add, 3, 0},
                                 {op::silu, -1, 0}},
                                4, numel));
    });
  }
}

TEST_CASE("cuda backend: layer_norm, rms_norm and softmax match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  struct row_size {
    std::string name;
    std::int64_t rows, cols;
  };
  // (37, 96), and rows wider than the 256 threads of a row's block.
  // A warp per row for whole 16-byte vectors of at most 256 per row: (37, 96) in every dtype, and
  // (5, 520) and (6, 1000) but in f64; a block per row for the rest (the 256 threads of a block
  // strided across (5, 520) and (6, 1000)), and (7, 100) in bf16 (100 is not whole 8-vectors).
  for (const row_size& s : {row_size{"(37, 96)", 37, 96}, row_size{"(5, 520)", 5, 520},
                            row_size{"(6, 1000)", 6, 1000}, row_size{"(7, 100)", 7, 100}}) {
    const std::int64_t numel = s.rows * s.cols;
    in_each_dtype("layer_norm " + s.name, elementwise, [&](dtype t) {
      // x off zero (mean ~1), so the two-pass variance matters; w, b (cols)
      return b.difference(t, numel,
                          {random_tensor(t, numel, 1, -1, 3), random_tensor(t, s.cols, 2, 0.5, 1.5),
                           random_tensor(t, s.cols, 3)},
                          [&](auto& call, auto&) {
                            call.kind = op::layer_norm;
                            set_dims(call, {s.rows, s.cols});
                            call.scalar = 1e-5;
                          });
    });
    in_each_dtype("rms_norm " + s.name, elementwise, [&](dtype t) {
      return b.difference(t, numel,
                          {random_tensor(t, numel, 4, -2, 2), random_tensor(t, s.cols, 5, 0.5, 1.5)},
                          [&](auto& call, auto&) {
                            call.kind = op::rms_norm;
                            set_dims(call, {s.rows, s.cols});
                            call.scalar = 1e-6;
                          });
    });
    in_each_dtype("softmax " + s.name, elementwise, [&](dtype t) {
      return b.difference(t, numel, {random_tensor(t, numel, 6, -4, 4)}, [&](auto& call, auto&) {
        call.kind = op::softmax;
        set_dims(call, {s.rows, s.cols});
      });
    });
  }
}

TEST_CASE("cuda backend: rope, split_heads, merge_heads and transpose match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  const std::int64_t batch = 2, heads = 3, seq = 7, head_dim = 16, numel = batch * heads * seq * head_dim;
  // The unscaled table, and yarn's: a ramp of frequencies and cos and sin scaled by 1.07.
  for (const sg::rope_scaling& scaling : rope_scalings()) {
    const sg::compute::rope_frequencies table = sg::compute::make_rope_frequencies(scaling, head_dim, seq);
    in_each_dtype("rope " + std::string(sg::rope_type_name(scaling.type)), elementwise, [&](dtype t) {
      return b.difference(t, numel, {random_tensor(t, numel, 1)}, [&](auto& call, auto&) {
        call.kind = op::rope;  // x (batch, heads, seq, head_dim)
        set_dims(call, {batch, heads, seq, head_dim});
        call.rope = &table;
      });
    });
  }
  // head_dim 16 moves 16-byte vectors in every dtype; head_dim 6 moves elements (but f64's pairs).
  for (const std::int64_t dim : {head_dim, std::int64_t{6}}) {
    const std::int64_t n = batch * heads * seq * dim;
    in_each_dtype("split_heads, head_dim " + std::to_string(dim), exact, [&](dtype t) {
      return b.difference(t, n, {random_tensor(t, n, 2)}, [&](auto& call, auto&) {
        call.kind = op::split_heads;  // (batch, seq, heads, head_dim) -> (batch, heads, seq, head_dim)
        set_dims(call, {batch, seq, heads, dim});
      });
    });
    in_each_dtype("merge_heads, head_dim " + std::to_string(dim), exact, [&](dtype t) {
      return b.difference(t, n, {random_tensor(t, n, 3)}, [&](auto& call, auto&) {
        call.kind = op::merge_heads;  // (batch, heads, seq, head_dim) -> (batch, seq, heads, head_dim)
        set_dims(call, {batch, seq, heads, dim});
      });
    });
  }
  in_each_dtype("transpose", exact, [&](dtype t) {
    const std::int64_t matrices = 3, rows = 7, cols = 24;  // (3, 7, 24) -> (3, 24, 7)
    return b.difference(t, matrices * rows * cols, {random_tensor(t, matrices * rows * cols, 4)},
                        [&](auto& call, auto&) {
                          call.kind = op::transpose;
                          set_dims(call, {matrices, rows, cols});
                        });
  });
}

// A generation program's calls (passes/attach_kv_cache.hpp): cached_attention writes the step's keys
// and values into a paged cache and attends over it; rope and position_embedding read the tokens'
// positions from kv_context. Row 0 holds 7 tokens after the step (positions 4 to 6, blocks 5 then
// 1), row 1 holds 3 (block 2); head_dim 40 gives some lanes two elements. The cache's other rows
// keep their random values on both backends.
TEST_CASE("cuda backend: cached_attention and kv_context positions match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  const std::int64_t batch = 2, heads = 4, kv_heads = 2, seq = 3, head_dim = 40, block_tokens = 4, blocks = 6;
  const host_tensor context{dtype::i32, {7, 5, 1, 0, 3, 2, 0, 0}};  // (batch, 1 + 3 blocks)
  const std::int64_t q_numel = batch * heads * seq * head_dim, kv_numel = batch * kv_heads * seq * head_dim;
  const std::int64_t cache_numel = blocks * kv_heads * 2 * block_tokens * head_dim;
  in_each_dtype("cached_attention", attention_tolerance, [&](dtype t) {
    return b.difference_of([&](auto& backend) {
      using buffer = typename std::decay_t<decltype(backend)>::buffer;
      buffer q = make_buffer(backend, random_tensor(t, q_numel, 1)), k = make_buffer(backend, random_tensor(t, kv_numel, 2));
      buffer v = make_buffer(backend, random_tensor(t, kv_numel, 3)), cache = make_buffer(backend, random_tensor(t, cache_numel, 4));
      buffer rows = make_buffer(backend, context);
      buffer out = make_buffer(backend, {t, std::vector<double>(static_cast<std::size_t>(q_numel), not_a_number)});
      sg::compute::kernel_call<buffer> call;
      call.kind = op::cached_attention;
      call.type = t;
      call.out = &out;
      call.in[0] = &q;
      call.in[1] = &k;
      call.in[2] = &v;
      call.in[3] = &cache;  // written in place
      call.in[4] = &rows;
      set_dims(call, {batch, heads, kv_heads, seq, head_dim, block_tokens});
      backend.run(call);
      return std::vector<std::vector<double>>{values_of(backend, out), values_of(backend, cache)};
    });
  }, wide_dtypes);
  const sg::compute::rope_frequencies table = sg::compute::make_rope_frequencies({}, head_dim, seq);
  in_each_dtype("rope at kv_context's positions", elementwise, [&](dtype t) {
    return b.difference(t, q_numel, {random_tensor(t, q_numel, 5), context}, [&](auto& call, auto&) {
      call.kind = op::rope;  // x (batch, heads, seq, head_dim), kv_context
      set_dims(call, {batch, heads, seq, head_dim});
      call.rope = &table;
    });
  });
  in_each_dtype("position_embedding at kv_context's positions", elementwise, [&](dtype t) {
    const std::int64_t cols = 24, positions = 9;  // x (2, 3, 24) + table (9, 24)[position]
    return b.difference(t, batch * seq * cols,
                        {random_tensor(t, batch * seq * cols, 6), random_tensor(t, positions * cols, 7), context},
                        [&](auto& call, auto&) {
                          call.kind = op::position_embedding;
                          set_dims(call, {batch, seq, cols});
                        });
  });
}

TEST_CASE("cuda backend: causal attention and its gradients match the cpu backend, MHA, GQA and MQA",
          "[cuda][gpu]") {
  both_backends b;
  // Head-major operands, and token-major ones (kernel_call::token_major: (batch, seq, heads,
  // head_dim), read and written in place by flash attention, permuted around the other kernels).
  for (const attention_shape& a : attention_shapes())
    for (const bool token_major : {false, true}) {
      const struct {
        op kind;
        const char* name;
      } ops[] = {{op::attention, "attention"},
                 {op::attention_grad_q, "attention_grad_q"},
                 {op::attention_grad_k, "attention_grad_k"},
                 {op::attention_grad_v, "attention_grad_v"}};
      const std::string layout = token_major ? " token-major" : "";
      for (const auto& o : ops)
        in_each_dtype(std::string(o.name) + " " + a.name + layout, attention_tolerance, [&](dtype t) {
          // out (batch, heads, seq, head_dim) for attention and dq, (batch, kv_heads, seq, head_dim) for
          // dk and dv
          const bool kv_sized = o.kind == op::attention_grad_k || o.kind == op::attention_grad_v;
          std::vector<host_tensor> inputs = attention_inputs(a, t);
          if (o.kind == op::attention) inputs.pop_back();  // the forward reads q, k, v
          return b.difference(t, kv_sized ? a.kv_numel(t) : a.q_numel(t), inputs, [&](auto& call, auto&) {
            call.kind = o.kind;
            call.token_major = token_major;
            set_dims(call, {a.batch, a.heads, a.kv_heads, a.seq(t), a.head_dim});
          });
        });
    }
}

// Non-causal and masked attention (ir/attention_masking.hpp): cuDNN's fused attention takes
// non-causal calls without a mask (the cuDNN shape, where the build has cuDNN); the rest runs the
// batched products around the (masked) softmax: head_dim 64 in bf16 too, a shape flash attention
// would take were the call causal and unmasked.
// Mask: batch row 0 pads its first key and its keys from seq - 3 on (causal query 0 sees none); row
// 1 pads none. Segment ids: three documents per row, the last one ending the sequence.
TEST_CASE("cuda backend: non-causal and masked attention and their gradients match the cpu backend",
          "[cuda][gpu]") {
  both_backends b;
  const std::vector<attention_shape>& shapes = attention_shapes();
  const sg::attention_masking maskings[] = {{.causal = false},
                                            {.causal = true, .mask = sg::attention_mask::padding},
                                            {.causal = false, .mask = sg::attention_mask::padding},
                                            {.causal = true, .mask = sg::attention_mask::segments},
                                            {.causal = false, .mask = sg::attention_mask::segments}};
  const attention_shape flash_sized{"head_dim 64 (heads 2, seq 64)", 1, 2, 2, 64, 64};
  for (const attention_shape& a : {shapes[0], shapes[1], flash_sized, shapes[7]})
    for (const sg::attention_masking& m : maskings)
      for (const op kind : {op::attention, op::attention_grad_q, op::attention_grad_k, op::attention_grad_v}) {
        const std::string what = std::string(sg::op_name(kind)) + " " + a.name + (m.causal ? " causal" : "") +
                                 (m.mask == sg::attention_mask::padding    ? " padding"
                                  : m.mask == sg::attention_mask::segments ? " segments"
                                                                           : "");
        in_each_dtype(what, attention_tolerance, [&](dtype t) {
          const std::int64_t seq = a.seq(t);
          std::vector<std::int64_t> mask(static_cast<std::size_t>(a.batch * seq), 1);
          for (std::int64_t j = 0; j < seq; ++j) {
            if (m.mask == sg::attention_mask::segments)
              for (std::int64_t row = 0; row < a.batch; ++row) mask[std::size_t(row * seq + j)] = j * 3 / seq;
            else if (j == 0 || j >= seq - 3)
              mask[std::size_t(j)] = 0;
          }
          std::vector<host_tensor> inputs = attention_inputs(a, t);
          if (kind == op::attention) inputs.pop_back();  // the forward reads q, k, v
          if (m.mask != sg::attention_mask::none) inputs.push_back(id_tensor(mask));
          const bool kv_sized = kind == op::attention_grad_k || kind == op::attention_grad_v;
          return b.difference(t, kv_sized ? a.kv_numel(t) : a.q_numel(t), inputs, [&](auto& call, auto&) {
            call.kind = kind;
            call.masking = m;
            set_dims(call, {a.batch, a.heads, a.kv_heads, seq, a.head_dim});
          });
        });
      }
}

namespace {

// An attention call of shape a into `out`: the forward reads q, k, v, a gradient also dout.
template <class Buffer>
sg::compute::kernel_call<Buffer> attention_call(op kind, const attention_shape& a, dtype t, const Buffer& q,
                                                const Buffer& k, const Buffer& v, const Buffer& dout,
                                                Buffer& out) {
  sg::compute::kernel_call<Buffer> call;
  call.kind = kind;
  call.type = t;
  call.out = &out;
  call.in[0] = &q;
  call.in[1] = &k;
  call.in[2] = &v;
  if (kind != op::attention) call.in[3] = &dout;
  set_dims(call, {a.batch, a.heads, a.kv_heads, a.seq(t), a.head_dim});
  return call;
}

// The three attention gradients of one set of inputs, asked for in the order k, v, q (the cuda
// backend makes all three on the first call and serves the next two from them), then dk after q
// changed through upload, and after q changed through scale: each must be that of the q it has then.
template <class Backend>
std::vector<std::vector<double>> attention_gradients_in_sequence(Backend& backend, const attention_shape& a,
                                                                 dtype t) {
  using buffer = typename Backend::buffer;
  const std::vector<host_tensor> inputs = attention_inputs(a, t);
  buffer q = make_buffer(backend, inputs[0]), k = make_buffer(backend, inputs[1]),
         v = make_buffer(backend, inputs[2]), dout = make_buffer(backend, inputs[3]);
  buffer dq = backend.allocate(t, a.q_numel(t)), dk = backend.allocate(t, a.kv_numel(t)),
         dv = backend.allocate(t, a.kv_numel(t));
  auto gradient = [&](op kind, buffer& out) {
    backend.run(attention_call(kind, a, t, q, k, v, dout, out));
    return values_of(backend, out);
  };
  std::vector<std::vector<double>> results;
  results.push_back(gradient(op::attention_grad_k, dk));
  results.push_back(gradient(op::attention_grad_v, dv));
  results.push_back(gradient(op::attention_grad_q, dq));
  backend.upload(q, to_bytes(t, random_values(a.q_numel(t), 99, -1.5, 1.5)).data());
  results.push_back(gradient(op::attention_grad_k, dk));
  backend.scale(q, 0.5);
  results.push_back(gradient(op::attention_grad_k, dk));
  return results;
}

}  // namespace

TEST_CASE("cuda backend: attention gradients asked one after another see the inputs as they are then",
          "[cuda][gpu]") {
  both_backends b;
  // GQA: dk and dv sum over each kv head's group; in bf16 through flash attention (head_dim 64)
  const char* const steps[] = {"attention_grad_k, first", "attention_grad_v, after k",
                               "attention_grad_q, after v", "attention_grad_k, after upload(q)",
                               "attention_grad_k, after scale(q, 0.5)"};
  for (const attention_shape& a : {attention_shapes()[1], attention_shapes()[4]}) {
    for (const dtype t : every_dtype) {
      SECTION("attention gradients in sequence " + a.name + " " + std::string(sg::dtype_name(t))) {
        const std::vector<std::vector<double>> want = attention_gradients_in_sequence(b.cpu, a, t);
        const std::vector<std::vector<double>> got = attention_gradients_in_sequence(b.cuda, a, t);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO(steps[i]);
          const double difference = relative_difference(got[i], want[i]);
          const double limit = attention_tolerance.of(t);
          CAPTURE(difference, limit);
          CHECK(difference <= limit);
        }
      }
    }
  }
}

TEST_CASE(
    "cuda backend: attention gradients that read the forward's kept result equal those that run the "
    "forward again",
    "[cuda][gpu]") {
  // kernel_call::output_kept and saved on the forward, its result as side and the same saved on the
  // gradients (fused::attention_saved): flash attention's backward then reads that result and the
  // log-sum-exp the forward saved. Scaling the kept result after the forward must change the
  // gradients (delta = rowsum(dout * out) is read from it).
  using buffer = sg::cuda::backend::buffer;
  sg::cuda::backend cuda;
  const dtype t = dtype::bf16;
  // (the last shape runs on cuDNN's fused attention where the build has cuDNN: its statistics are
  // kept the same way)
  for (const attention_shape& a : {attention_shapes()[3], attention_shapes()[4], attention_shapes()[7]})
    for (const bool token_major : {false, true}) {
      SECTION(a.name + (token_major ? " token-major" : "")) {
        const std::vector<host_tensor> inputs = attention_inputs(a, t);
        buffer q = make_buffer(cuda, inputs[0]), k = make_buffer(cuda, inputs[1]),
               v = make_buffer(cuda, inputs[2]), dout = make_buffer(cuda, inputs[3]);
        buffer out = cuda.allocate(t, a.q_numel(t));
        const auto call_of = [&](op kind, buffer& result) {
          auto call = attention_call(kind, a, t, q, k, v, dout, result);
          call.token_major = token_major;
          return call;
        };
        buffer saved = cuda.allocate(dtype::f32, a.batch * a.heads * a.seq(t));
        auto forward = call_of(op::attention, out);
        forward.output_kept = true;
        forward.saved = &saved;
        cuda.run(forward);
        const auto gradients = [&](bool read_kept) {
          std::vector<std::vector<double>> all;
          for (const op kind : {op::attention_grad_q, op::attention_grad_k, op::attention_grad_v}) {
            buffer d = cuda.allocate(t, kind == op::attention_grad_q ? a.q_numel(t) : a.kv_numel(t));
            auto call = call_of(kind, d);
            if (read_kept) call.side = &out, call.saved = &saved;
            cuda.run(call);
            all.push_back(values_of(cuda, d));
          }
          return all;
        };
        const std::vector<std::vector<double>> kept = gradients(true);
        const std::vector<std::vector<double>> again = gradients(false);
        CHECK(kept == again);
        cuda.scale(out, 0.5);
        const std::vector<std::vector<double>> changed = gradients(true);
        CHECK(changed != again);
      }
    }
}

TEST_CASE("cuda backend: an attention_grad_q call writing dk and dv too equals the three calls",
          "[cuda][gpu]") {
  // kernel_call::key_grad, value_grad: one backward writes dq, dk and dv where they belong, in every
  // dtype and layout (bf16 with head_dim 64 through flash attention; token-major f32 on head-major
  // copies, three calls apart). The outputs are poisoned first.
  using buffer = sg::cuda::backend::buffer;
  sg::cuda::backend cuda;
  for (const attention_shape& a : {attention_shapes()[1], attention_shapes()[4], attention_shapes()[7]})
    for (const dtype t : every_dtype)
      for (const bool token_major : {false, true}) {
        SECTION(a.name + " " + std::string(sg::dtype_name(t)) + (token_major ? " token-major" : "")) {
          const std::vector<host_tensor> inputs = attention_inputs(a, t);
          buffer q = make_buffer(cuda, inputs[0]), k = make_buffer(cuda, inputs[1]),
                 v = make_buffer(cuda, inputs[2]), dout = make_buffer(cuda, inputs[3]);
          const auto poisoned = [&](std::int64_t numel) {
            return make_buffer(
                cuda, host_tensor{t, std::vector<double>(static_cast<std::size_t>(numel), not_a_number)});
          };
          const auto call_of = [&](op kind, buffer& result) {
            auto call = attention_call(kind, a, t, q, k, v, dout, result);
            call.token_major = token_major;
            return call;
          };
          std::vector<std::vector<double>> apart;
          for (const op kind : {op::attention_grad_q, op::attention_grad_k, op::attention_grad_v}) {
            buffer d = poisoned(kind == op::attention_grad_q ? a.q_numel(t) : a.kv_numel(t));
            cuda.run(call_of(kind, d));
            apart.push_back(values_of(cuda, d));
          }
          buffer dq = poisoned(a.q_numel(t)), dk = poisoned(a.kv_numel(t)), dv = poisoned(a.kv_numel(t));
          auto together = call_of(op::attention_grad_q, dq);
          together.key_grad = &dk;
          together.value_grad = &dv;
          cuda.run(together);
          CHECK(values_of(cuda, dq) == apart[0]);
          CHECK(values_of(cuda, dk) == apart[1]);
          CHECK(values_of(cuda, dv) == apart[2]);
        }
      }
}

TEST_CASE(
    "cuda backend: the cross-entropy gradient reading the statistics its loss kept equals the one "
    "computing them",
    "[cuda][gpu]") {
  // kernel_call::saved on the loss, the loss as side and the same saved on the gradient
  // (fused::cross_entropy_saved): the gradient reads each row's log-sum-exp the loss saved instead
  // of a pass over the logits. Halving the logits after
  // the loss must change that gradient (the kept statistics are of the old logits).
  using buffer = sg::cuda::backend::buffer;
  sg::cuda::backend cuda;
  // vocab: whole 16-byte vectors, the last 5 columns padding
  const std::int64_t rows = 37, vocab = 96, classes = 91, global_rows = 2 * rows;
  for (const dtype t : every_dtype) {
    SECTION(std::string(sg::dtype_name(t))) {
      const dtype loss_type = t == dtype::bf16 ? dtype::f32 : t;
      buffer logits = make_buffer(cuda, random_tensor(t, rows * vocab, 4, -3, 3));
      buffer targets = make_buffer(cuda, id_tensor(targets_for(rows, classes)));
      buffer loss = cuda.allocate(loss_type, 1);
      buffer loss_gradient = make_buffer(cuda, host_tensor{loss_type, {2.5}});
      buffer saved = cuda.allocate(t == dtype::f64 ? dtype::f64 : dtype::f32, rows);
      sg::compute::kernel_call<buffer> forward;
      forward.kind = op::cross_entropy;
      forward.type = loss_type;
      forward.out = &loss;
      forward.in[0] = &logits;
      forward.in[1] = &targets;
      forward.output_kept = true;
      forward.saved = &saved;
      set_dims(forward, {rows, vocab, classes, global_rows, -100});
      cuda.run(forward);
      const auto gradient = [&](bool read_kept) {
        buffer d = cuda.allocate(t, rows * vocab);
        sg::compute::kernel_call<buffer> call;
        call.kind = op::cross_entropy_grad;
        call.type = t;
        call.out = &d;
        call.in[0] = &logits;
        call.in[1] = &targets;
        call.in[2] = &loss_gradient;
        if (read_kept) call.side = &loss, call.saved = &saved;
        set_dims(call, {rows, vocab, classes, global_rows, -100});
        cuda.run(call);
        return values_of(cuda, d);
      };
      const std::vector<double> kept = gradient(true), again = gradient(false);
      const double difference = relative_difference(kept, again), limit = elementwise.of(t);
      CAPTURE(difference, limit);
      CHECK(difference <= limit);
      // Halved logits keep their old log-sum-exp: each probability but the target's comes out about
      // 0.43 times its value, 0.036 of the largest gradient here (rounding differs by under 1e-3).
      cuda.scale(logits, 0.5);
      CHECK(relative_difference(gradient(true), gradient(false)) > 1e-2);
    }
  }
}

TEST_CASE(
    "cuda backend: the loss's call writing the logits' gradient equals the loss and the gradient apart, "
    "in place and not",
    "[cuda][gpu]") {
  // kernel_call::logits_grad on the loss: one kernel where the rows are whole 16-byte vectors ((37,
  // 96) and a GPT-2 row of 50304 padding 50257 classes), the two kernels in turn otherwise ((5,
  // 300)); the gradient is the one for a loss gradient of 1, written into its own buffer or over the
  // logits; the padding columns' gradient is zero.
  using buffer = sg::cuda::backend::buffer;
  sg::cuda::backend cuda;
  struct loss_size {
    std::string name;
    std::int64_t rows, vocab, classes;
  };
  for (const loss_size& s : {loss_size{"(37, 96)", 37, 96, 96}, loss_size{"(5, 300) of 297", 5, 300, 297},
                             loss_size{"(6, 50304) of 50257", 6, 50304, 50257}})
    for (const dtype t : every_dtype)
      for (const bool in_place : {false, true}) {
        SECTION(s.name + " " + std::string(sg::dtype_name(t)) + (in_place ? " in place" : "")) {
          const std::int64_t global_rows = 2 * s.rows;
          const dtype loss_type = t == dtype::bf16 ? dtype::f32 : t;
          const host_tensor logits_values = random_tensor(t, s.rows * s.vocab, 5, -3, 3);
          buffer logits = make_buffer(cuda, logits_values);
          buffer targets = make_buffer(cuda, id_tensor(targets_for(s.rows, s.classes)));
          buffer one = make_buffer(cuda, host_tensor{loss_type, {1.0}});
          const auto call_of = [&](op kind, buffer& result) {
            sg::compute::kernel_call<buffer> call;
            call.kind = kind;
            call.type = kind == op::cross_entropy ? loss_type : t;
            call.out = &result;
            call.in[0] = &logits;
            call.in[1] = &targets;
            if (kind == op::cross_entropy_grad) call.in[2] = &one;
            set_dims(call, {s.rows, s.vocab, s.classes, global_rows, -100});
            return call;
          };
          buffer loss_apart = cuda.allocate(loss_type, 1);
          buffer gradient_apart = make_buffer(
              cuda,
              host_tensor{t, std::vector<double>(static_cast<std::size_t>(s.rows * s.vocab), not_a_number)});
          cuda.run(call_of(op::cross_entropy, loss_apart));
          cuda.run(call_of(op::cross_entropy_grad, gradient_apart));
          buffer loss = cuda.allocate(loss_type, 1);
          buffer own_gradient = make_buffer(
              cuda,
              host_tensor{t, std::vector<double>(static_cast<std::size_t>(s.rows * s.vocab), not_a_number)});
          auto together = call_of(op::cross_entropy, loss);
          together.logits_grad = in_place ? &logits : &own_gradient;
          cuda.run(together);
          const double loss_difference =
              relative_difference(values_of(cuda, loss), values_of(cuda, loss_apart));
          const double gradient_difference =
              relative_difference(values_of(cuda, *together.logits_grad), values_of(cuda, gradient_apart));
          CAPTURE(loss_difference, gradient_difference);
          CHECK(loss_difference <= loss_tolerance.of(t));
          CHECK(gradient_difference <= elementwise.of(t));
          // The ignored row's gradient is zero, written (not left NaN).
          const std::vector<double> g = values_of(cuda, *together.logits_grad);
          CHECK(
              std::all_of(g.begin() + 2 * s.vocab, g.begin() + 3 * s.vocab, [](double x) { return x == 0; }));
          for (std::int64_t r = 0; r < s.rows; ++r)  // and so is every padding column's
            CHECK(std::all_of(g.begin() + r * s.vocab + s.classes, g.begin() + (r + 1) * s.vocab,
                              [](double x) { return x == 0; }));
          if (!in_place) CHECK(values_of(cuda, logits) == values_of(cuda, make_buffer(cuda, logits_values)));
        }
      }
}

TEST_CASE("cuda backend: cross_entropy and its gradient match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  struct loss_size {
    std::string name;
    std::int64_t rows, vocab, classes, ignore_index;
  };
  // Row 2 is ignored; the divisor (global_rows) is twice the local rows, as on one of two
  // data-parallel ranks. The padded vocabularies' columns past `classes` are left out, by the vector
  // kernels (37, 96) and by the others (5, 300); -1 as the ignore index, as a user may set it.
  for (const loss_size& s : {loss_size{"(37, 96)", 37, 96, 96, -100}, loss_size{"(5, 300)", 5, 300, 300, -100},
                             loss_size{"(37, 96) of 61", 37, 96, 61, -100},
                             loss_size{"(5, 300) of 297, ignoring -1", 5, 300, 297, -1}}) {
    const std::int64_t global_rows = 2 * s.rows;
    std::vector<std::int64_t> targets = targets_for(s.rows, s.classes);
    targets[2] = s.ignore_index;
    in_each_dtype("cross_entropy " + s.name + ", a row ignored", loss_tolerance, [&](dtype t) {
      // logits (rows, vocab) in t, targets (rows) i64; the loss (one element) is f32 under bf16 logits
      const dtype loss_type = t == dtype::bf16 ? dtype::f32 : t;
      return b.difference(
          loss_type, 1,
          {random_tensor(t, s.rows * s.vocab, 1, -3, 3), id_tensor(targets)}, [&](auto& call, auto&) {
            call.kind = op::cross_entropy;
            set_dims(call, {s.rows, s.vocab, s.classes, global_rows, s.ignore_index});
          });
    });
    in_each_dtype("cross_entropy_grad " + s.name + ", a row ignored", elementwise, [&](dtype t) {
      // dlogits (rows, vocab) in t; the loss's gradient (one element, here a loss scale of 2.5) is f32
      // under bf16 logits, as the loss it is the gradient of
      const dtype loss_type = t == dtype::bf16 ? dtype::f32 : t;
      return b.difference(t, s.rows * s.vocab,
                          {random_tensor(t, s.rows * s.vocab, 2, -3, 3), id_tensor(targets),
                           host_tensor{loss_type, {2.5}}},
                          [&](auto& call, auto&) {
                            call.kind = op::cross_entropy_grad;
                            set_dims(call, {s.rows, s.vocab, s.classes, global_rows, s.ignore_index});
                          });
    });
  }
}

TEST_CASE("cuda backend: the vocabulary-parallel cross-entropy's calls match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  // The middle slice (columns [40, 80)) and the last (columns [80, 120), of which 101 - 80 are
  // classes) of a vocabulary of 120 padded columns over 3 ranks; row 2 ignored.
  const std::int64_t rows = 9, columns = 40, classes = 101, ranks = 3;
  std::vector<std::int64_t> targets = targets_for(rows, classes);
  targets[2] = -100;
  for (const std::int64_t offset : {std::int64_t{40}, std::int64_t{80}}) {
    const std::string where = " at column " + std::to_string(offset);
    const auto statistics_call = [&](auto& call, op kind) {
      call.kind = kind;
      set_dims(call, {rows, columns, classes, offset, -100, ranks});
    };
    in_each_dtype("vocab_statistics" + where, loss_tolerance, [&](dtype t) {
      const dtype rows_type = t == dtype::bf16 ? dtype::f32 : t;
      return b.difference(rows_type, rows * 2, {random_tensor(t, rows * columns, 1, -3, 3), id_tensor(targets)},
                          [&](auto& call, auto&) { statistics_call(call, op::vocab_statistics); });
    });
    in_each_dtype("vocab_exp_sum" + where, loss_tolerance, [&](dtype t) {
      const dtype rows_type = t == dtype::bf16 ? dtype::f32 : t;
      return b.difference(rows_type, rows,
                          {random_tensor(t, rows * columns, 2, -3, 3), random_tensor(rows_type, rows * 2, 3, 0, 2)},
                          [&](auto& call, auto&) { statistics_call(call, op::vocab_exp_sum); });
    });
    in_each_dtype("vocab cross_entropy_grad" + where, elementwise, [&](dtype t) {
      const dtype rows_type = t == dtype::bf16 ? dtype::f32 : t;
      return b.difference(t, rows * columns,
                          {random_tensor(t, rows * columns, 4, -3, 3), id_tensor(targets),
                           host_tensor{rows_type, {2.5}}, random_tensor(rows_type, rows, 5, 3, 4)},
                          [&](auto& call, auto&) {
                            call.kind = op::cross_entropy_grad;
                            set_dims(call, {rows, columns, classes, 2 * rows, -100, offset});
                          });
    });
  }
  in_each_dtype("vocab_log_sum_exp", loss_tolerance, [&](dtype t) {
    return b.difference(t, rows, {random_tensor(t, rows * 2, 6, -2, 2), random_tensor(t, rows, 7, 1, 3)},
                        [&](auto& call, auto&) {
                          call.kind = op::vocab_log_sum_exp;
                          set_dims(call, {rows});
                        });
  }, wide_dtypes);
  in_each_dtype("vocab cross_entropy", loss_tolerance, [&](dtype t) {
    return b.difference(t, 1,
                        {random_tensor(t, rows * columns, 8, -3, 3), id_tensor(targets),
                         random_tensor(t, rows, 9, 3, 4), random_tensor(t, rows * 2, 10, -1, 1)},
                        [&](auto& call, auto&) {
                          call.kind = op::cross_entropy;
                          set_dims(call, {rows, columns, classes, 2 * rows, -100});
                        });
  }, wide_dtypes);
}

TEST_CASE("cuda backend: a target outside the vocabulary is an error at the next synchronisation",
          "[cuda][gpu]") {
  both_backends b;
  const std::int64_t rows = 5, vocab = 24;
  const host_tensor logits = random_tensor(dtype::f32, rows * vocab, 1, -2, 2);
  // The call on the cuda backend, run: the kernel only flags the target, run() returns. The buffers
  // stay alive until the flag is read.
  using buffer = sg::cuda::backend::buffer;
  struct flagged_call {
    buffer logits, targets, loss_gradient, out;
  };
  auto run_with_targets = [&](op kind, const std::vector<std::int64_t>& targets, std::int64_t out_numel) {
    flagged_call f{make_buffer(b.cuda, logits), make_buffer(b.cuda, id_tensor(targets)),
                   make_buffer(b.cuda, {dtype::f32, {1.0}}), b.cuda.allocate(dtype::f32, out_numel)};
    sg::compute::kernel_call<buffer> call;
    call.kind = kind;
    call.type = dtype::f32;
    call.out = &f.out;
    call.in[0] = &f.logits;
    call.in[1] = &f.targets;
    if (kind == op::cross_entropy_grad) call.in[2] = &f.loss_gradient;
    set_dims(call, {rows, vocab, vocab, rows, -100});
    CHECK(sg::testing::error_of([&] { b.cuda.run(call); }) == "(no error)");
    return f;
  };
  SECTION("cross_entropy, reported by download") {
    const flagged_call f = run_with_targets(op::cross_entropy, {3, vocab, 1, -100, 7}, 1);
    float loss = 0;
    CHECK_THAT(sg::testing::error_of([&] { b.cuda.download(f.out, &loss); }),
               sg::testing::ContainsSubstring("outside the vocabulary"));
    // The reference rejects the same target when it runs.
    CHECK_THAT(sg::testing::error_of([&] {
                 b.difference(dtype::f32, 1, {logits, id_tensor({3, vocab, 1, -100, 7})},
                              [&](auto& call, auto&) {
                                call.kind = op::cross_entropy;
                                set_dims(call, {rows, vocab, vocab, rows, -100});
                              });
               }),
               sg::testing::ContainsSubstring("outside the vocabulary"));
  }
  SECTION("cross_entropy_grad, reported by synchronize()") {
    const flagged_call f =
        run_with_targets(op::cross_entropy_grad, {3, 1, -5, -100, 7}, rows * vocab);  // -5 < 0
    CHECK_THAT(sg::testing::error_of([&] { b.cuda.synchronize(); }),
               sg::testing::ContainsSubstring("outside the vocabulary"));
  }
  // Reported once, and the backend computes as before.
  CHECK(sg::testing::error_of([&] { b.cuda.synchronize(); }) == "(no error)");
  const double difference =
      b.difference(dtype::f32, 1, {logits, id_tensor({3, 0, 1, -100, vocab - 1})}, [&](auto& call, auto&) {
        call.kind = op::cross_entropy;
        set_dims(call, {rows, vocab, vocab, rows, -100});
      });
  CHECK(difference <= loss_tolerance.f32);
}

// ---- gradient ops ---------------------------------------------------------------------------------

// A weight gradient's call on x (in 0) and dy (in 1) that also writes the bias gradient
// (kernel_call::bias_grad), `describe` setting its kind and dims: dw then db, each poisoned first,
// on both backends.
template <class Describe>
double weight_and_bias_difference(both_backends& b, dtype t, const host_tensor& x, const host_tensor& dy,
                                  std::int64_t weight_numel, std::int64_t bias_numel, Describe&& describe) {
  const auto poison = [&](std::int64_t numel) {
    return host_tensor{t, std::vector<double>(static_cast<std::size_t>(numel), not_a_number)};
  };
  return b.difference_of([&](auto& backend) {
    using buffer = typename std::decay_t<decltype(backend)>::buffer;
    buffer xs = make_buffer(backend, x), dys = make_buffer(backend, dy);
    buffer dw = make_buffer(backend, poison(weight_numel)), db = make_buffer(backend, poison(bias_numel));
    sg::compute::kernel_call<buffer> call;
    call.type = t;
    call.out = &dw;
    call.in[0] = &xs;
    call.in[1] = &dys;
    call.bias_grad = &db;
    describe(call);
    backend.run(call);
    std::vector<double> both = values_of(backend, dw);
    for (double v : values_of(backend, db)) both.push_back(v);
    return both;
  });
}

TEST_CASE("cuda backend: linear_weight_grad and bias_grad match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  struct weight_size {
    std::string name;
    std::int64_t rows, k, n;
    std::span<const dtype> types;
  };
  // x (rows, k), dy (rows, n): dw (k, n) = x^T dy, or (n, k) = dy^T x. The odd shape in f64 and f32.
  const std::vector<weight_size> sizes{{"x (37, 24), dy (37, 40)", 37, 24, 40, every_dtype},
                                       {"x (5, 13), dy (5, 11)", 5, 13, 11, wide_dtypes}};
  for (const weight_size& s : sizes)
    for (const bool transposed : {false, true}) {
      const std::string name = "linear_weight_grad " + s.name + (transposed ? ", dw (n, k)" : ", dw (k, n)");
      in_each_dtype(
          name, long_sums,
          [&](dtype t) {
            return b.difference(t, s.k * s.n,
                                {random_tensor(t, s.rows * s.k, 1), random_tensor(t, s.rows * s.n, 2)},
                                [&](auto& call, auto&) {
                                  call.kind = op::linear_weight_grad;
                                  set_dims(call, {s.rows, s.k, s.n});
                                  call.transpose_b = transposed;
                                });
          },
          s.types);
    }
  // With kernel_call::bias_grad the product also writes dy's column sums (cuBLASLt's bias-gradient
  // epilogue where it has one for the shape, else the column-sum kernels; with
  // bias_grad_in_product off, always the kernels): both outputs checked, each poisoned first.
  // (64, 32) x (64, 48) suits 16-bit epilogue kernels; 37 rows may not.
  const std::vector<weight_size> with_bias{{"x (64, 32), dy (64, 48)", 64, 32, 48, every_dtype},
                                           {"x (37, 24), dy (37, 40)", 37, 24, 40, every_dtype}};
  for (const bool in_product : {true, false})
    for (const weight_size& s : with_bias)
      for (const bool transposed : {false, true}) {
        both_backends sums{{}, sg::cuda::backend({.bias_grad_in_product = in_product})};
        const std::string name = "linear_weight_grad with bias_grad " + s.name +
                                 (transposed ? ", dw (n, k)" : ", dw (k, n)") +
                                 (in_product ? ", sums in the product" : "");
        in_each_dtype(
            name, long_sums,
            [&](dtype t) {
              return weight_and_bias_difference(sums, t, random_tensor(t, s.rows * s.k, 1),
                                                random_tensor(t, s.rows * s.n, 2), s.k * s.n, s.n,
                                                [&](auto& call) {
                                                  call.kind = op::linear_weight_grad;
                                                  call.transpose_b = transposed;
                                                  set_dims(call, {s.rows, s.k, s.n});
                                                });
            },
            s.types);
      }
  // dy (rows, n) -> db (n); 261 rows are three of the column sums' 128-row splits. n = 40 and 600
  // are whole 16-byte vectors in every dtype (600 spans three blocks of 256 bf16 columns); 300 is
  // not in bf16 (its scalar kernel).
  for (const std::int64_t rows : {37, 261}) {
    for (const std::int64_t n : {40, 300, 600}) {
      in_each_dtype("bias_grad, (" + std::to_string(rows) + ", " + std::to_string(n) + ")", long_sums,
                    [&](dtype t) {
                      return b.difference(t, n, {random_tensor(t, rows * n, 3)}, [&](auto& call, auto&) {
                        call.kind = op::bias_grad;
                        set_dims(call, {rows, n});
                      });
                    });
    }
  }
}

// Three products of one x as one batched call (kernel_call::batch): each operand's three lie in one
// block at a stride of their size plus 8 elements, whose gaps hold 0.5 and must keep it; the results
// start as NaN. The cpu backend runs the three one at a time; the cuda backend one cuBLASLt call (in
// f64, the three apart). Forward: x (rows, k) w_b (+ bias_b); weight gradient: x^T dy_b (+ the
// column sums of dy_b, in the product's epilogue or, bias_grad_in_product off, by the kernels).
TEST_CASE("cuda backend: batched products of one x match the cpu backend's, one at a time", "[cuda][gpu]") {
  both_backends in_product{{}, sg::cuda::backend({.bias_grad_in_product = true})},
      apart{{}, sg::cuda::backend({.bias_grad_in_product = false})};
  constexpr std::int64_t rows = 64, k = 32, n = 48, batch = 3, gap = 8;
  // Three members of `numel` elements (values from `seed`, or NaN), each followed by the gap.
  const auto block = [&](dtype t, std::int64_t numel, std::uint32_t seed, bool poisoned) {
    host_tensor h{t, {}};
    for (std::int64_t m = 0; m < batch; ++m) {
      const std::vector<double> v = poisoned
                                        ? std::vector<double>(static_cast<std::size_t>(numel), not_a_number)
                                        : random_values(numel, seed + static_cast<std::uint32_t>(m));
      h.values.insert(h.values.end(), v.begin(), v.end());
      h.values.insert(h.values.end(), static_cast<std::size_t>(gap), 0.5);
    }
    return h;
  };
  for (both_backends* b : {&in_product, &apart})
    for (const bool forward : {true, false})
      for (const bool transposed : {false, true})
        for (const bool with_bias : {true, false}) {
          if (b == &in_product && (forward || !with_bias)) continue;  // only bias gradients differ
          const std::string name = std::string(forward ? "linear" : "linear_weight_grad") +
                                   (transposed ? ", weight (n, k)" : ", weight (k, n)") +
                                   (with_bias ? (forward ? ", bias" : ", bias_grad") : "") +
                                   (b == &in_product ? ", sums in the product" : "");
          in_each_dtype(name, long_sums, [&](dtype t) {
            return b->difference_of([&](auto& backend) {
              using buffer = typename std::decay_t<decltype(backend)>::buffer;
              // forward: in[1] the weights (k * n each), out (rows * n); backward: in[1] dy (rows * n),
              // out the weight gradients (k * n)
              const std::int64_t second = forward ? k * n : rows * n, result = forward ? rows * n : k * n;
              buffer x = make_buffer(backend, random_tensor(t, rows * k, 1));
              buffer ins = make_buffer(backend, block(t, second, 2, false));
              buffer outs = make_buffer(backend, block(t, result, 0, true));
              buffer biases = make_buffer(backend, block(t, n, 5, !forward && with_bias));
              buffer in1 = backend.view(ins, 0, t, second), out = backend.view(outs, 0, t, result),
                     bias = backend.view(biases, 0, t, n);
              sg::compute::kernel_call<buffer> call;
              call.kind = forward ? op::linear : op::linear_weight_grad;
              call.type = t;
              call.in[0] = &x;
              call.in[1] = &in1;
              call.out = &out;
              call.transpose_b = transposed;
              set_dims(call, {rows, k, n});
              if (with_bias && forward) call.bias = &bias;
              if (with_bias && !forward) call.bias_grad = &bias;
              call.batch = batch;
              call.batch_strides[0] = second + gap;
              call.batch_strides[1] = result + gap;
              call.batch_strides[2] = n + gap;
              backend.run(call);
              return std::vector<std::vector<double>>{values_of(backend, outs), values_of(backend, biases)};
            });
          });
        }
}

TEST_CASE("cuda backend: the activations' gradients and softmax_grad match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  // 203 elements: the scalar kernel; 200: whole 16-byte vectors in every dtype.
  for (const std::int64_t numel : {std::int64_t{203}, std::int64_t{200}}) {
    for (const op kind : {op::gelu_grad, op::silu_grad, op::relu_grad, op::gelu_erf_grad, op::quick_gelu_grad}) {
      in_each_dtype(
          std::string(sg::op_name(kind)) + " of " + std::to_string(numel), elementwise, [&](dtype t) {
            // in0 = the activation's input x, in1 = dy
            return b.difference(t, numel, {random_tensor(t, numel, 1, -4, 4), random_tensor(t, numel, 2)},
                                [&](auto& call, auto&) {
                                  call.kind = kind;
                                  set_dims(call, {numel});
                                });
          });
    }
  }
  in_each_dtype("softmax_grad", elementwise, [&](dtype t) {
    const std::int64_t rows = 37, cols = 50;  // in0 = y = softmax(x) (rows, cols), in1 = dy
    return b.difference(t, rows * cols,
                        {host_tensor{t, softmax_rows(random_values(rows * cols, 3, -3, 3), rows, cols)},
                         random_tensor(t, rows * cols, 4)},
                        [&](auto& call, auto&) {
                          call.kind = op::softmax_grad;
                          set_dims(call, {rows, cols});
                        });
  });
}

TEST_CASE("cuda backend: the norms' gradients match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  // (37, 96): a warp per row in every dtype; (6, 1000): a warp per row (8 vectors per lane) in bf16
  // and f32, a block per row in f64; (7, 100): a block per row in bf16; (300, 64): a warp per row,
  // and the three gradients together over three blocks of 16 rows a warp.
  struct row_size {
    std::int64_t rows, cols;
  };
  for (const row_size size : {row_size{37, 96}, row_size{6, 1000}, row_size{7, 100}, row_size{300, 64}}) {
    const std::int64_t rows = size.rows, cols = size.cols, numel = rows * cols;
    const std::string name = " (" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
    // x (rows, cols) off zero, w (cols), dy (rows, cols)
    const auto x = [&](dtype t) { return random_tensor(t, numel, 1, -1, 3); };
    const auto w = [&](dtype t) { return random_tensor(t, cols, 2, 0.5, 1.5); };
    const auto dy = [&](dtype t) { return random_tensor(t, numel, 3); };
    for (const op kind : {op::layer_norm_grad_x, op::rms_norm_grad_x})
      in_each_dtype(std::string(sg::op_name(kind)) + name, elementwise, [&](dtype t) {
        // in0 = x, in1 = w, in2 = dy: dx (rows, cols)
        return b.difference(t, numel, {x(t), w(t), dy(t)}, [&](auto& call, auto&) {
          call.kind = kind;
          set_dims(call, {rows, cols});
          call.scalar = 1e-5;
        });
      });
    for (const op kind : {op::layer_norm_grad_w, op::rms_norm_grad_w})
      in_each_dtype(std::string(sg::op_name(kind)) + name, long_sums, [&](dtype t) {
        // in0 = x, in1 = dy: dw (cols), a sum over the rows
        return b.difference(t, cols, {x(t), dy(t)}, [&](auto& call, auto&) {
          call.kind = kind;
          set_dims(call, {rows, cols});
          call.scalar = 1e-5;
        });
      });
    // With kernel_call::bias_grad the norm's weight gradient also writes dy's column sums (in the
    // same pass where the columns are whole 16-byte vectors): both outputs checked, each poisoned.
    in_each_dtype("layer_norm_grad_w with bias_grad" + name, long_sums, [&](dtype t) {
      return weight_and_bias_difference(b, t, x(t), dy(t), cols, cols, [&](auto& call) {
        call.kind = op::layer_norm_grad_w;
        call.scalar = 1e-5;
        set_dims(call, {rows, cols});
      });
    });
    // With kernel_call::weight_grad the input gradient also writes the weight gradient (and the
    // layer norm's bias gradient), in one pass where rows hold at most 4 vectors a lane, and adds
    // the residual's gradient: dx, dw, db against the cpu's, each poisoned first.
    for (const op kind : {op::layer_norm_grad_x, op::rms_norm_grad_x})
      for (dtype t : every_dtype) {
        SECTION(std::string(sg::op_name(kind)) + " with weight_grad" + name + " " +
                std::string(sg::dtype_name(t))) {
          const bool layer = kind == op::layer_norm_grad_x;
          const host_tensor residual = random_tensor(t, numel, 4);
          const auto three_gradients = [&](auto& backend) {
            using buffer = typename std::decay_t<decltype(backend)>::buffer;
            const auto poisoned = [&](std::int64_t n) {
              return make_buffer(
                  backend, host_tensor{t, std::vector<double>(static_cast<std::size_t>(n), not_a_number)});
            };
            buffer xs = make_buffer(backend, x(t)), ws = make_buffer(backend, w(t)),
                   dys = make_buffer(backend, dy(t)), adds = make_buffer(backend, residual);
            buffer dx = poisoned(numel), dw = poisoned(cols), db = poisoned(cols);
            sg::compute::kernel_call<buffer> call;
            call.kind = kind;
            call.type = t;
            call.out = &dx;
            call.in[0] = &xs;
            call.in[1] = &ws;
            call.in[2] = &dys;
            call.scalar = 1e-5;
            call.epilogue = sg::compute::product_epilogue::add;
            call.side = &adds;
            call.weight_grad = &dw;
            if (layer) call.bias_grad = &db;
            set_dims(call, {rows, cols});
            backend.run(call);
            std::vector<std::vector<double>> all{values_of(backend, dx), values_of(backend, dw)};
            if (layer) all.push_back(values_of(backend, db));
            return all;
          };
          const auto want = three_gradients(b.cpu), got = three_gradients(b.cuda);
          REQUIRE(got.size() == want.size());
          const double dx_difference = relative_difference(got[0], want[0]);
          CAPTURE(dx_difference);
          CHECK(dx_difference <= elementwise.of(t));
          for (std::size_t k = 1; k < got.size(); ++k) {
            const double sum_difference = relative_difference(got[k], want[k]);
            CAPTURE(k, sum_difference);
            CHECK(sum_difference <= long_sums.of(t));
          }
        }
      }
  }
}

TEST_CASE("cuda backend: rope_grad, the embeddings' gradients and ones match the cpu backend",
          "[cuda][gpu]") {
  both_backends b;
  for (const sg::rope_scaling& scaling : rope_scalings()) {
    const std::int64_t batch = 2, heads = 3, seq = 7, head_dim = 16, numel = batch * heads * seq * head_dim;
    const sg::compute::rope_frequencies table = sg::compute::make_rope_frequencies(scaling, head_dim, seq);
    in_each_dtype("rope_grad " + std::string(sg::rope_type_name(scaling.type)), elementwise, [&](dtype t) {
      return b.difference(t, numel, {random_tensor(t, numel, 1)}, [&](auto& call, auto&) {
        call.kind = op::rope_grad;  // dy (batch, heads, seq, head_dim) -> dx
        set_dims(call, {batch, heads, seq, head_dim});
        call.rope = &table;
      });
    });
  }
  // Each row sums its tokens in token order, as the cpu backend does (no atomics): the same bits.
  in_each_dtype("embedding_grad, repeated ids and ids outside rows [8, 19)", exact, [&](dtype t) {
    const std::int64_t tokens = 37, table_rows = 11, cols = 24, row_offset = 8;
    // ids (37), dout (37, 24) -> dtable (11, 24): sums of the rows of each id in [8, 19)
    return b.difference(t, table_rows * cols,
                        {id_tensor(embedding_ids(tokens)), random_tensor(t, tokens * cols, 2)},
                        [&](auto& call, auto&) {
                          call.kind = op::embedding_grad;
                          set_dims(call, {tokens, table_rows, cols, row_offset});
                        });
  });
  // 21 columns: no 16-byte vectors, the scalar kernel
  in_each_dtype("embedding_grad, rows of 21, repeated ids", exact, [&](dtype t) {
    const std::int64_t tokens = 37, table_rows = 19, cols = 21;
    return b.difference(t, table_rows * cols,
                        {id_tensor(embedding_ids(tokens)), random_tensor(t, tokens * cols, 3)},
                        [&](auto& call, auto&) {
                          call.kind = op::embedding_grad;
                          set_dims(call, {tokens, table_rows, cols, 0});
                        });
  });
  // 264 columns: 33 bf16 vectors a row, so a lane takes two
  in_each_dtype("embedding_grad, GPT-2's 50304 rows, 4096 tokens on 977 of them", exact, [&](dtype t) {
    const std::int64_t tokens = 4096, table_rows = 50304, cols = 264;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(tokens));
    for (std::int64_t i = 0; i < tokens; ++i) ids[static_cast<std::size_t>(i)] = (i * i + 7 * i) % 977 * 51;
    return b.difference(t, table_rows * cols, {id_tensor(ids), random_tensor(t, tokens * cols, 4)},
                        [&](auto& call, auto&) {
                          call.kind = op::embedding_grad;
                          set_dims(call, {tokens, table_rows, cols, 0});
                        });
  });
  // A tied table's gradient: the lookup's rows plus the output layer's weight gradient, rounded as
  // the gradient and then the add apart (the cpu backend runs the two): the same bits. 24 columns
  // take the vector kernel in every dtype, 21 the scalar one.
  for (const std::int64_t cols : {std::int64_t{24}, std::int64_t{21}})
    in_each_dtype("embedding_grad then add, rows of " + std::to_string(cols), exact, [&](dtype t) {
      const std::int64_t tokens = 37, table_rows = 19;
      return b.difference(t, table_rows * cols,
                          {id_tensor(embedding_ids(tokens)), random_tensor(t, tokens * cols, 5),
                           random_tensor(t, table_rows * cols, 6)},
                          [&](auto& call, auto& in) {
                            call.kind = op::embedding_grad;
                            set_dims(call, {tokens, table_rows, cols, 0});
                            call.in[2] = nullptr;
                            call.epilogue = sg::compute::product_epilogue::add;
                            call.side = &in[2];
                          });
    });
  // 40 columns: whole 16-byte vectors in every dtype (the vector kernel); 41: the column sums
  for (const std::int64_t cols : {std::int64_t{40}, std::int64_t{41}})
    in_each_dtype("position_embedding_grad, rows of " + std::to_string(cols), long_sums, [&](dtype t) {
      const std::int64_t batch = 3, seq = 7, positions = 9;
      // dy (3, 7, cols) -> dtable (9, cols): rows t < 7 sum over the batch, rows 7 and 8 are zero
      return b.difference(t, positions * cols, {random_tensor(t, batch * seq * cols, 3)},
                          [&](auto& call, auto&) {
                            call.kind = op::position_embedding_grad;
                            set_dims(call, {batch, seq, cols, positions});
                          });
    });
  for (const double loss_scale : {0.0, 1024.0})
    in_each_dtype("ones, scalar " + std::to_string(static_cast<int>(loss_scale)), exact, [&](dtype t) {
      const std::int64_t numel = 5;  // 1 when the scalar is 0, else the loss scale
      return b.difference(t, numel, {}, [&](auto& call, auto&) {
        call.kind = op::ones;
        set_dims(call, {numel});
        call.scalar = loss_scale;
      });
    });
}

// ---- TrainingBackend --------------------------------------------------------------------------------

TEST_CASE("cuda backend: the optimizer's operations match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  const std::int64_t numel = 301;
  for (const dtype t : every_dtype) {
    const std::string type(sg::dtype_name(t));
    SECTION("sum_of_squares " + type) {  // accumulated in double by both
      const host_tensor x = random_tensor(t, numel, 1);
      auto want = make_buffer(b.cpu, x);
      auto got = make_buffer(b.cuda, x);
      const double reference = b.cpu.sum_of_squares(want);
      const double difference = std::abs(b.cuda.sum_of_squares(got) - reference) / reference;
      CAPTURE(difference);
      CHECK(difference <= 1e-12);
    }
    SECTION("scale " + type) {  // f32: the cpu multiplies by the double factor, the gpu by it in f32
      const double difference = b.difference_of([&](auto& backend) {
        auto x = make_buffer(backend, random_tensor(t, numel, 2));
        backend.scale(x, 0.37);
        return values_of(backend, x);
      });
      CAPTURE(difference);
      CHECK(difference <= tolerance{1e-12, 1e-6, 2e-2}.of(t));
    }
    SECTION("fill_zero " + type) {
      const double difference = b.difference_of([&](auto& backend) {
        auto x = make_buffer(backend, random_tensor(t, numel, 3));
        backend.fill_zero(x);
        return values_of(backend, x);
      });
      CHECK(difference == 0);
    }
    SECTION("copy_range " + type) {  // from[5, 22) -> to[9, 26), the rest of `to` unchanged
      const double difference = b.difference_of([&](auto& backend) {
        auto from = make_buffer(backend, random_tensor(t, 50, 4));
        auto to = make_buffer(backend, random_tensor(t, 40, 5));
        backend.copy_range(from, 5, to, 9, 17);
        return values_of(backend, to);
      });
      CHECK(difference == 0);
    }
    SECTION("all_finite " + type) {
      auto finite_then_not = [&](auto& backend) {
        std::vector<double> values = random_values(numel, 6);
        auto x = make_buffer(backend, {t, values});
        std::vector<double> answers{backend.all_finite(x) ? 1.0 : 0.0};
        values[200] = not_a_number;
        backend.upload(x, to_bytes(t, values).data());
        answers.push_back(backend.all_finite(x) ? 1.0 : 0.0);
        values[200] = 0.5;
        values[numel - 1] = -infinity;
        backend.upload(x, to_bytes(t, values).data());
        answers.push_back(backend.all_finite(x) ? 1.0 : 0.0);
        return answers;
      };
      const std::vector<double> want{1, 0, 0};
      CHECK(finite_then_not(b.cpu) == want);
      CHECK(finite_then_not(b.cuda) == want);
    }
  }
  // add_scaled: to += 0.75 from. f32 targets: the cpu adds in double and rounds once, the gpu in f32.
  struct pair {
    dtype from, to;
    double limit;
  };
  for (const pair p : {pair{dtype::f64, dtype::f64, 1e-12}, pair{dtype::f32, dtype::f32, 1e-6},
                       pair{dtype::bf16, dtype::f32, 1e-6}}) {
    SECTION("add_scaled " + std::string(sg::dtype_name(p.from)) + " into " +
            std::string(sg::dtype_name(p.to))) {
      const double difference = b.difference_of([&](auto& backend) {
        auto from = make_buffer(backend, random_tensor(p.from, numel, 7));
        auto to = make_buffer(backend, random_tensor(p.to, numel, 8));
        backend.add_scaled(from, to, 0.75);
        return values_of(backend, to);
      });
      CAPTURE(difference);
      CHECK(difference <= p.limit);
    }
  }
  // convert rounds to nearest even once (f64 -> bf16 through f32 on both), so the values are equal.
  SECTION("convert f32 -> bf16 -> f32, f64 -> f32 and f64 -> bf16") {
    const double difference = b.difference_of([&](auto& backend) {
      auto f32 = make_buffer(backend, random_tensor(dtype::f32, numel, 9, -300, 300));
      auto f64 = make_buffer(backend, random_tensor(dtype::f64, numel, 10));
      auto bf16 = backend.allocate(dtype::bf16, numel);
      auto back = backend.allocate(dtype::f32, numel);
      std::vector<std::vector<double>> results;
      backend.convert(f32, bf16);
      results.push_back(values_of(backend, bf16));
      backend.convert(bf16, back);
      results.push_back(values_of(backend, back));
      backend.convert(f64, back);
      results.push_back(values_of(backend, back));
      backend.convert(f64, bf16);
      results.push_back(values_of(backend, bf16));
      return results;
    });
    CHECK(difference == 0);
  }
}

TEST_CASE("cuda backend: adamw over several steps matches the cpu backend", "[cuda][gpu]") {
  both_backends b;
  const std::int64_t numel = 257;
  // Both compute each element in double from the stored values; the gpu may fuse multiply-adds.
  struct precision {
    dtype type;
    double limit;
  };
  // Braces around each loop body: nvcc aborts on a SECTION (with Catch2 3's nv_diagnostic pragmas)
  // as the unbraced body of a for.
  for (const precision p : {precision{dtype::f64, 1e-12}, precision{dtype::f32, 1e-6}}) {
    for (const double weight_decay : {0.0, 0.1}) {
      SECTION("adamw " + std::string(sg::dtype_name(p.type)) + ", weight_decay " +
              std::to_string(weight_decay)) {
        const dtype t = p.type;
        const double limit = p.limit;
        const double difference = b.difference_of([&](auto& backend) {
          auto param = make_buffer(backend, random_tensor(t, numel, 1));
          auto m = backend.allocate(t, numel);
          auto v = backend.allocate(t, numel);
          backend.fill_zero(m);
          backend.fill_zero(v);
          std::vector<std::vector<double>> history;  // param, m and v after each step
          for (std::int64_t step = 1; step <= 4; ++step) {
            auto grad = make_buffer(backend, random_tensor(t, numel, static_cast<std::uint32_t>(10 + step)));
            backend.adamw(param, grad, m, v,
                          {.lr = 1e-2,
                           .beta1 = 0.9,
                           .beta2 = 0.95,
                           .eps = 1e-8,
                           .weight_decay = weight_decay,
                           .step = step});
            history.push_back(values_of(backend, param));
            history.push_back(values_of(backend, m));
            history.push_back(values_of(backend, v));
          }
          return history;
        });
        CAPTURE(difference, limit);
        CHECK(difference <= limit);
      }
    }
  }
}

TEST_CASE("cuda backend: adamw_many equals adamw and convert tensor by tensor, as the cpu runs them",
          "[cuda][gpu]") {
  both_backends b;
  // f32 masters of 257, 40000 (three of the kernel's chunks) and 5 elements, the first two with bf16
  // copies, an f64 parameter, and an empty one; each with its own weight decay.
  // Gradients of the parameter's dtype or bf16 (a 16-bit model's own gradient, widened as it is
  // read), some times a clipping factor (rounded as scale() rounds: float products on the gpu,
  // double then f32 on the cpu, one f32 unit apart at most).
  struct tensor_size {
    dtype type;
    std::int64_t numel;
    bool rounded;
    double weight_decay;
    dtype grad_type;
    double grad_factor;
  };
  const std::vector<tensor_size> sizes{{dtype::f32, 257, true, 0.1, dtype::bf16, 0.37},
                                       {dtype::f32, 40000, true, 0.0, dtype::bf16, 1.0},
                                       {dtype::f32, 5, false, 0.1, dtype::f32, 0.5},
                                       {dtype::f64, 33, false, 0.1, dtype::f64, 0.37},
                                       {dtype::f32, 0, false, 0.0, dtype::f32, 1.0}};
  const double difference = b.difference_of([&](auto& backend) {
    using buffer = typename std::decay_t<decltype(backend)>::buffer;
    std::vector<buffer> params, grads, ms, vs, copies;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const tensor_size& z = sizes[k];
      const auto seed = static_cast<std::uint32_t>(10 * k);
      params.push_back(make_buffer(backend, random_tensor(z.type, z.numel, seed + 1)));
      grads.push_back(make_buffer(backend, random_tensor(z.grad_type, z.numel, seed + 2)));
      ms.push_back(backend.allocate(z.type, z.numel));
      vs.push_back(backend.allocate(z.type, z.numel));
      backend.fill_zero(ms.back());
      backend.fill_zero(vs.back());
      copies.push_back(backend.allocate(dtype::bf16, z.rounded ? z.numel : 0));
    }
    std::vector<std::vector<double>> history;  // every buffer after each step
    for (std::int64_t step = 1; step <= 3; ++step) {
      std::vector<sg::compute::adamw_update<buffer>> updates;
      for (std::size_t k = 0; k < sizes.size(); ++k)
        updates.push_back({.param = &params[k],
                           .grad = &grads[k],
                           .m = &ms[k],
                           .v = &vs[k],
                           .rounded = sizes[k].rounded ? &copies[k] : nullptr,
                           .arguments = {.lr = 1e-2, .weight_decay = sizes[k].weight_decay, .step = step},
                           .grad_factor = sizes[k].grad_factor});
      if constexpr (requires(std::span<const sg::compute::adamw_update<buffer>> all) {
                      backend.adamw_many(all);
                    }) {
        backend.adamw_many(std::span<const sg::compute::adamw_update<buffer>>(updates));
      } else {
        for (const auto& u : updates) {
          backend.adamw(*u.param, *u.grad, *u.m, *u.v, u.arguments);
          if (u.rounded != nullptr) backend.convert(*u.param, *u.rounded);
        }
      }
      for (std::size_t k = 0; k < sizes.size(); ++k)
        for (const buffer* x : {&params[k], &ms[k], &vs[k], &copies[k]})
          history.push_back(values_of(backend, *x));
    }
    return history;
  });
  // As the per-tensor adamw test: each element in double from the stored values (the gpu may fuse
  // multiply-adds); the bf16 copies round those f32 values once.
  CAPTURE(difference);
  CHECK(difference <= 1e-6);
}

TEST_CASE("cuda backend: copy and the block moves of collectives match the cpu backend", "[cuda][gpu]") {
  both_backends b;
  // A tensor (outer 4, parts 3 * mid 5, inner 7) split along its middle dimension into 3 blocks.
  for (const dtype t : every_dtype) {
    const sg::compute::block_layout layout{.parts = 3,
                                           .outer = 4,
                                           .mid = 5,
                                           .inner = 7,
                                           .element_bytes = static_cast<std::int64_t>(sg::dtype_size(t))};
    const std::int64_t numel = layout.parts * layout.outer * layout.mid * layout.inner;
    const host_tensor whole = random_tensor(t, numel, 1);
    SECTION("copy, deinterleave, interleave and slice " + std::string(sg::dtype_name(t))) {
      const double difference = b.difference_of([&](auto& backend) {
        auto x = make_buffer(backend, whole);
        auto copied = backend.allocate(t, numel);
        auto blocks = backend.allocate(t, numel);                // [parts][outer][mid][inner]
        auto restored = backend.allocate(t, numel);              // (outer, parts*mid, inner) again
        auto block = backend.allocate(t, numel / layout.parts);  // (outer, mid, inner) of block 2
        backend.copy(x, copied);
        backend.deinterleave(x, blocks, layout);
        backend.interleave(blocks, restored, layout);
        backend.slice(x, block, layout, 2);
        return std::vector<std::vector<double>>{values_of(backend, copied), values_of(backend, blocks),
                                                values_of(backend, restored), values_of(backend, block)};
      });
      CHECK(difference == 0);
      // And interleave undoes deinterleave.
      auto x = make_buffer(b.cuda, whole);
      auto blocks = b.cuda.allocate(t, numel);
      auto restored = b.cuda.allocate(t, numel);
      b.cuda.deinterleave(x, blocks, layout);
      b.cuda.interleave(blocks, restored, layout);
      CHECK(relative_difference(values_of(b.cuda, restored), values_of(b.cuda, x)) == 0);
    }
  }
}

TEST_CASE("cuda backend: free_bytes is the GPU's free memory; more than that is an error naming the bytes",
          "[cuda][gpu][memory]") {
  sg::cuda::backend cuda;
  std::size_t free = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  const std::size_t reported = cuda.free_bytes();
  CHECK(reported > 0);
  CHECK(reported <= total);
  // Twice the device's memory in f32 elements: within 64 bits, beyond what cudaMalloc can give.
  const auto too_many = static_cast<std::int64_t>(total / 2);
  CHECK_THROWS_WITH(cuda.allocate(dtype::f32, too_many),
                    sg::testing::ContainsSubstring("cuda::backend: allocate") && sg::testing::ContainsSubstring("does not fit"));
  CHECK_THROWS_WITH(cuda.allocate(dtype::f32, std::int64_t{1} << 62),
                    sg::testing::ContainsSubstring("does not fit in 64 bits"));
}
