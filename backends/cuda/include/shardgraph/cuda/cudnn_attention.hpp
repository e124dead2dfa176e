#pragma once
// Attention forward and backward, causal or not, on cuDNN's fused flash-attention engines (on
// Hopper, its warpgroup-MMA kernels), described as cuDNN backend graphs: the products, the scale,
// the causal mask (shape::causal) and the softmax with its statistics, which cuDNN's runtime fusion turns into one kernel each
// way. The graphs are those that cuDNN documents for "fused flash attention" (the same nodes that
// cudnn-frontend's sdpa and sdpa_backward lower to).
//
//   q, dq, out, dout: (batch, heads, seq, head_dim); k, v, dk, dv: the same (no GQA here), either
//   head-major or token-major ((batch, seq, heads, head_dim), the products' layout), 16-bit.
//   statistics: (batch, heads, seq) f32, the natural log of each query row's softmax sum plus its
//   max: written by the forward, read by the backward.
//
// A plan is built once per shape (cuDNN compiles it) and kept. cuDNN 9.6
// or newer at run time: the backward graph below is the node order those versions fuse (earlier
// ones wanted another order and a cleared dq accumulator); with an older cuDNN, supports() is
// false and the backend keeps its own kernels.
#include <shardgraph/core/dtype.hpp>
#include <shardgraph/cuda/cudnn_graph.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <tuple>

namespace shardgraph::cuda {

class cudnn_attention {
 public:
  struct shape {
    std::int64_t batch, heads, seq, head_dim;
    dtype type;
    bool token_major;
    double scale;  // of the scores: 1 / sqrt(head_dim) unless the model says otherwise
    bool causal = true;
    using key_type = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, dtype, bool, double, bool>;
    key_type key() const { return {batch, heads, seq, head_dim, type, token_major, scale, causal}; }
  };

  static constexpr std::size_t oldest_cudnn = 90600;  // cudnnGetVersion() of 9.6.0

  // What these graphs take: 16-bit self-attention (causal or not) without GQA or a padding mask, head_dim a multiple of 8 up
  // to 128, seq a multiple of 128 (cuDNN before 9.16 needs padding masks for other lengths).
  static bool supports(const shape& s, std::int64_t kv_heads) {
    return (s.type == dtype::bf16 || s.type == dtype::f16) && kv_heads == s.heads && s.head_dim % 8 == 0 &&
           s.head_dim <= 128 && s.seq % 128 == 0 && s.seq > 0 && s.batch > 0 &&
           cudnnGetVersion() >= oldest_cudnn;
  }

  cudnn_attention() = default;
  cudnn_attention(const cudnn_attention&) = delete;
  cudnn_attention& operator=(const cudnn_attention&) = delete;
  ~cudnn_attention() {
    plans_.clear();
    if (handle_ != nullptr) static_cast<void>(cudnnDestroy(handle_));
  }

  // Bytes of workspace forward() and backward() need for s (their plans are built here).
  std::size_t forward_workspace(const shape& s) { return plans_for(s).forward->workspace_bytes(); }
  std::size_t backward_workspace(const shape& s) {
    plans& p = plans_for(s);
    return p.backward->workspace_bytes() + extra_backward_bytes(s);
  }

  // Whether the backward's engine gives the same bits on every run (no atomics).
  bool backward_deterministic(const shape& s) { return plans_for(s).backward->deterministic(); }

  void forward(const shape& s, const void* q, const void* k, const void* v, void* out, float* statistics,
               void* workspace, cudaStream_t stream) {
    plans_for(s).forward->run(stream,
                              {{uid::q, const_cast<void*>(q)},
                               {uid::k, const_cast<void*>(k)},
                               {uid::v, const_cast<void*>(v)},
                               {uid::out, out},
                               {uid::statistics, statistics}},
                              workspace);
  }

  // workspace: backward_workspace(s) bytes, 256-byte aligned.
  void backward(const shape& s, const void* q, const void* k, const void* v, const void* out,
                const void* dout, const float* statistics, void* dq, void* dk, void* dv, void* workspace,
                cudaStream_t stream) {
    // (batch, heads, seq) row sums of dout * out, then dq in f32 (batch, heads, seq, head_dim), then
    // cuDNN's own workspace.
    char* at = static_cast<char*>(workspace);
    void* row_sums = at;
    void* dq_f32 = at + round_up(rows(s) * sizeof(float));
    void* own = at + extra_backward_bytes(s);
    plans_for(s).backward->run(stream,
                               {{uid::q, const_cast<void*>(q)},
                                {uid::k, const_cast<void*>(k)},
                                {uid::v, const_cast<void*>(v)},
                                {uid::out, const_cast<void*>(out)},
                                {uid::statistics, const_cast<float*>(statistics)},
                                {uid::dout, const_cast<void*>(dout)},
                                {uid::dq, dq},
                                {uid::dk, dk},
                                {uid::dv, dv},
                                {uid::row_sums, row_sums},
                                {uid::dq_f32, dq_f32}},
                               own);
  }

 private:
  struct uid {
    enum : std::int64_t {
      q = 1,
      k,
      v,
      out,
      statistics,
      dout,
      dq,
      dk,
      dv,
      scale,
      fill,
      one,
      row_sums,
      dq_f32,
    };
  };
  struct plans {
    std::unique_ptr<cudnn_graph> forward, backward;
  };
  using dims = std::vector<std::int64_t>;

  static std::size_t round_up(std::int64_t bytes) {
    return static_cast<std::size_t>((bytes + 255) / 256 * 256);
  }
  static std::int64_t rows(const shape& s) { return s.batch * s.heads * s.seq; }
  static std::size_t extra_backward_bytes(const shape& s) {
    return round_up(rows(s) * 4) + round_up(rows(s) * s.head_dim * 4);
  }

  // (batch, heads, seq, head_dim) dims and the strides of s's layout; with `transposed`, the last
  // two dims swapped (k^T, v^T: the same memory read across).
  static dims matrix_dims(const shape& s, bool transposed = false) {
    return transposed ? dims{s.batch, s.heads, s.head_dim, s.seq} : dims{s.batch, s.heads, s.seq, s.head_dim};
  }
  static dims matrix_strides(const shape& s, bool transposed = false) {
    const std::int64_t d = s.head_dim, h = s.heads, n = s.seq;
    const dims st = s.token_major ? dims{n * h * d, d, h * d, 1} : dims{h * n * d, n * d, d, 1};
    return transposed ? dims{st[0], st[1], st[3], st[2]} : st;
  }
  static dims scores_dims(const shape& s) { return {s.batch, s.heads, s.seq, s.seq}; }
  static dims scores_strides(const shape& s) { return {s.heads * s.seq * s.seq, s.seq * s.seq, s.seq, 1}; }
  static dims row_dims(const shape& s) { return {s.batch, s.heads, s.seq, 1}; }
  static dims row_strides(const shape& s) { return {s.heads * s.seq, s.seq, 1, 1}; }
  static cudnnDataType_t element_type(const shape& s) {
    return s.type == dtype::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  }
  static float scale_of(const shape& s) { return static_cast<float>(s.scale); }

  // scores with the keys after each query replaced by `fill`: row index >= column index kept.
  static cudnn_graph::tensor_ref causal(cudnn_graph& g, const cudnn_graph::tensor_ref& scores) {
    const auto fill = g.scalar(uid::fill, -std::numeric_limits<float>::infinity());
    const auto row = g.like(scores, CUDNN_DATA_INT32), column = g.like(scores, CUDNN_DATA_INT32);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, row, CUDNN_DATA_FLOAT, 2);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, column, CUDNN_DATA_FLOAT, 3);
    const auto visible = g.like(scores, CUDNN_DATA_BOOLEAN);
    g.pointwise(CUDNN_POINTWISE_CMP_GE, row, &column, nullptr, visible, CUDNN_DATA_BOOLEAN);
    const auto masked = g.like(scores);
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, &fill, &visible, masked);
    return masked;
  }

  // out = softmax(mask(q k^T * scale)) v, statistics = max + log(sum of exp(x - max)) by row.
  std::unique_ptr<cudnn_graph> forward_graph(const shape& s) {
    auto g = std::make_unique<cudnn_graph>(handle(), "cudnn_attention forward");
    const cudnnDataType_t t = element_type(s);
    const auto q = g->tensor(uid::q, matrix_dims(s), matrix_strides(s), t);
    const auto kt = g->tensor(uid::k, matrix_dims(s, true), matrix_strides(s, true), t);
    const auto v = g->tensor(uid::v, matrix_dims(s), matrix_strides(s), t);
    const auto out = g->tensor(uid::out, matrix_dims(s), matrix_strides(s), t);
    const auto statistics = g->tensor(uid::statistics, row_dims(s), row_strides(s), CUDNN_DATA_FLOAT);
    const auto scale = g->scalar(uid::scale, scale_of(s));

    const auto scores = g->intermediate(scores_dims(s), scores_strides(s), CUDNN_DATA_FLOAT);
    g->matmul(q, kt, scores);
    const auto scaled = g->pointwise(CUDNN_POINTWISE_MUL, scores, &scale);
    const auto x = s.causal ? causal(*g, scaled) : scaled;
    const auto max = g->intermediate(row_dims(s), row_strides(s), CUDNN_DATA_FLOAT);
    g->reduction(CUDNN_REDUCE_TENSOR_MAX, x, max);
    const auto e = g->pointwise(CUDNN_POINTWISE_EXP, g->pointwise(CUDNN_POINTWISE_SUB, x, &max));
    const auto sum = g->intermediate(row_dims(s), row_strides(s), CUDNN_DATA_FLOAT);
    g->reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
    const auto log_sum = g->pointwise(CUDNN_POINTWISE_LOG, sum);
    g->pointwise(CUDNN_POINTWISE_ADD, max, &log_sum, nullptr, statistics);
    const auto p = g->intermediate(scores_dims(s), scores_strides(s), t);
    g->pointwise(CUDNN_POINTWISE_DIV, e, &sum, nullptr, p);
    g->matmul(p, v, out);
    return g;
  }

  // dv = P^T dout, dS = P (dout v^T - rowsum(dout out)) * scale, dk = dS^T q, dq = dS k, with P
  // recomputed as exp(mask(q k^T * scale - statistics)).
  std::unique_ptr<cudnn_graph> backward_graph(const shape& s) {
    auto g = std::make_unique<cudnn_graph>(handle(), "cudnn_attention backward");
    const cudnnDataType_t t = element_type(s), f = CUDNN_DATA_FLOAT;
    const auto q = g->tensor(uid::q, matrix_dims(s), matrix_strides(s), t);
    const auto kt = g->tensor(uid::k, matrix_dims(s, true), matrix_strides(s, true), t);
    const auto vt = g->tensor(uid::v, matrix_dims(s, true), matrix_strides(s, true), t);
    const auto out = g->tensor(uid::out, matrix_dims(s), matrix_strides(s), t);
    const auto statistics = g->tensor(uid::statistics, row_dims(s), row_strides(s), f);
    const auto dout = g->tensor(uid::dout, matrix_dims(s), matrix_strides(s), t);
    const auto dq = g->tensor(uid::dq, matrix_dims(s), matrix_strides(s), t);
    const auto dk = g->tensor(uid::dk, matrix_dims(s), matrix_strides(s), t);
    const auto dv = g->tensor(uid::dv, matrix_dims(s), matrix_strides(s), t);
    const auto scale = g->scalar(uid::scale, scale_of(s));
    const auto one = g->scalar(uid::one, 1.0f);

    // rowsum(dout * out), kept in memory (the row sums of FlashAttention-2's backward)
    const auto products = g->intermediate(matrix_dims(s), matrix_strides(s), f);
    g->pointwise(CUDNN_POINTWISE_MUL, dout, &out, nullptr, products);
    const auto summed = g->intermediate(row_dims(s), row_strides(s), f);
    g->reduction(CUDNN_REDUCE_TENSOR_ADD, products, summed);
    const auto row_sums = g->tensor(uid::row_sums, row_dims(s), row_strides(s), f);
    g->pointwise(CUDNN_POINTWISE_MUL, summed, &one, nullptr, row_sums);

    // P from the statistics
    const auto scores = g->intermediate(scores_dims(s), scores_strides(s), f);
    g->matmul(q, kt, scores);
    const auto x =
        g->pointwise(CUDNN_POINTWISE_SUB, g->pointwise(CUDNN_POINTWISE_MUL, scores, &scale), &statistics);
    const auto p = g->pointwise(CUDNN_POINTWISE_EXP, s.causal ? causal(*g, x) : x);

    // dv = P^T dout: P seen transposed, in the inputs' dtype
    dims transposed_strides = scores_strides(s);
    std::swap(transposed_strides[2], transposed_strides[3]);
    const auto pt = g->intermediate(scores_dims(s), transposed_strides, t);
    g->reshape(p, pt);
    g->matmul(pt, dout, dv);

    // dS
    const auto dp = g->intermediate(scores_dims(s), scores_strides(s), f);
    g->matmul(dout, vt, dp);
    const auto ds = g->pointwise(
        CUDNN_POINTWISE_MUL,
        g->pointwise(CUDNN_POINTWISE_MUL, g->pointwise(CUDNN_POINTWISE_SUB, dp, &row_sums), &p), &scale);

    // dk = dS^T q
    const auto dst = g->intermediate(scores_dims(s), transposed_strides, t);
    g->reshape(ds, dst);
    g->matmul(dst, q, dk);

    // dq = dS k, accumulated in f32 then rounded
    const auto k = g->intermediate(matrix_dims(s), matrix_strides(s), f);
    g->reshape(kt, k);
    const std::int64_t d = s.head_dim;
    const auto dq_f32 = g->tensor(uid::dq_f32, matrix_dims(s), {s.heads * s.seq * d, s.seq * d, d, 1}, f);
    g->matmul(ds, k, dq_f32);
    g->pointwise(CUDNN_POINTWISE_IDENTITY, dq_f32, nullptr, nullptr, dq);
    return g;
  }

  cudnnHandle_t handle() {
    if (handle_ == nullptr) detail::check_cudnn(cudnnCreate(&handle_), "cudnn_attention (cudnnCreate)");
    return handle_;
  }

  plans& plans_for(const shape& s) {
    const auto found = plans_.find(s.key());
    if (found != plans_.end()) return found->second;
    plans p{.forward = forward_graph(s), .backward = backward_graph(s)};
    for (const auto& [graph, direction] :
         {std::pair{p.forward.get(), "forward"}, std::pair{p.backward.get(), "backward"}})
      if (!graph->finalize())
        fail("cuda: cudnn_attention",
             detail::text("cuDNN ", cudnnGetVersion(), " has no engine for the attention ", direction, " of ",
                          describe(s)),
             "Update cuDNN, or set SHARDGRAPH_CUDA_ATTENTION=flash to use shardgraph's own kernels");
    return plans_.emplace(s.key(), std::move(p)).first->second;
  }

  static std::string describe(const shape& s) {
    return detail::text("batch ", s.batch, ", heads ", s.heads, ", seq ", s.seq, ", head_dim ", s.head_dim,
                        ", ", dtype_name(s.type), s.token_major ? ", token-major" : ", head-major",
                        s.causal ? ", causal" : ", not causal");
  }

  cudnnHandle_t handle_ = nullptr;
  std::map<shape::key_type, plans> plans_;
};

}  // namespace shardgraph::cuda
