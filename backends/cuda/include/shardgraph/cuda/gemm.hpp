#pragma once
// gemm: the linear layer's matrix product on the GPU through cuBLASLt, with its epilogue fused:
//
//   y (M, N) = x (M, K) . w (K, N)  [+ bias (N)]  [then GELU (tanh form)]      all row-major
//
//   shardgraph::cuda::gemm_runner gemm;                        // one cuBLASLt handle + workspace + plans
//   gemm.run({.m = M, .n = N, .k = K, .type = element::bf16, .post = epilogue::bias_gelu},
//            x.data(), w.data(), bias.data(), y.data(), stream);
//
// Row-major y = x w is column-major y^T = w^T x^T, so cuBLASLt multiplies A = w (column-major
// N x K, ld N) by B = x (column-major K x M, ld K) into C = y (column-major N x M, ld N), and the
// bias is a per-row (length N) vector of C, which is what cuBLASLt's bias epilogue adds.
// f32 computes in f32 (no TF32, so it can be compared with the cpu backend), f64 in f64; bf16 and
// f16 take f32 accumulation and round the output once. Failures name the call, the sizes and the
// status.
//
// The algorithm of a plan is, by default, the fastest of cuBLASLt's first few heuristic answers,
// timed on the first call's own operands (gemm_choice::timed, as XLA autotunes its GEMMs): the
// heuristic's first answer is not always its fastest, and a plan serves every later call. Choices
// rest on timings, so two processes may pick different algorithms and round differently;
// gemm_choice::heuristic takes the first answer, the same in every run.
//
// The general form, matmul_problem, is what the compute backend runs: a batch of row-major products
//   C[i] (m, n) = alpha op(A[i]) op(B[i]) + beta C[i]   [+ bias]   op(X) = X or X^T (stored transposed)
// with A, B and C of their own element types (bf16 inputs into an f32 C, for attention's scores).
// The types are in gemm_problem.hpp, the cuBLASLt plumbing in cublaslt.hpp.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/cublaslt.hpp>
#include <shardgraph/cuda/device_buffer.hpp>
#include <shardgraph/cuda/gemm_problem.hpp>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace shardgraph::cuda {

class gemm_runner {
 public:
  static constexpr std::size_t workspace_bytes = std::size_t{32} << 20;  // cuBLASLt's split-K and friends

  // How many of cuBLASLt's first answers gemm_choice::timed times: `candidates` (default 8, or
  // SHARDGRAPH_CUDA_GEMM_CANDIDATES), at most candidates_most.
  static constexpr int candidates_timed = 8;
  static constexpr int candidates_most = 32;

  explicit gemm_runner(gemm_choice choice = gemm_choice::timed, int candidates = 0)
      : workspace_(workspace_bytes), choice_(choice), candidates_(candidates_chosen(candidates)) {
    detail::check_cublas(cublasLtCreate(&handle_.value), "gemm_runner (cublasLtCreate)");
  }

  // y = epilogue(x w + bias); `bias` may be null unless the epilogue adds it. The first call of a
  // shape (and pointer alignment) makes its plan: descriptors and cuBLASLt's heuristic choice of
  // algorithm; later calls reuse it and only set the bias pointer.
  void run(const gemm_shape& s, const void* x, const void* w, const void* bias, void* y,
           cudaStream_t stream = nullptr) {
    run(matmul_problem{.m = s.m,
                       .n = s.n,
                       .k = s.k,
                       .a_type = s.type,
                       .b_type = s.type,
                       .c_type = s.type,
                       .post = s.post},
        x, w, y, bias, stream, detail::gemm_text(s));
  }

  // The general product (matmul_problem); `what` names it in errors.
  void run(const matmul_problem& s, const void* a, const void* b, void* c, const void* bias,
           cudaStream_t stream, const std::string& what) {
    run(s, a, b, c, epilogue_operands{.bias = bias}, stream, what);
  }
  void run(const matmul_problem& s, const void* a, const void* b, void* c, const epilogue_operands& e,
           cudaStream_t stream, const std::string& what) {
    try_run(s, a, b, c, e, stream, what, false);  // never declines: plan_for fails with the reason
  }

  // run(), except that an epilogue cuBLASLt has no algorithm for (for these sizes, types and
  // alignments) returns false, having run nothing, when `may_decline`; the caller then computes
  // the epilogue's part itself. The answer is remembered per plan.
  bool try_run(const matmul_problem& s, const void* a, const void* b, void* c, const epilogue_operands& e,
               cudaStream_t stream, const std::string& what, bool may_decline) {
    if (s.m < 1 || s.n < 1 || s.k < 1 || s.batch < 1)
      fail("cuda: " + what, "every dimension must be at least 1, and the batch too",
           "check the layer's sizes");
    const bool has_bias = detail::uses_bias_pointer(s.post), has_aux = detail::uses_aux_pointer(s.post);
    if (has_bias && e.bias == nullptr)
      fail("cuda: " + what, "the epilogue reads or writes a bias but no bias was given",
           "pass the bias, or epilogue::none/gelu");
    if (has_aux && (e.aux == nullptr || s.batch != 1))
      fail("cuda: " + what, "the GELU epilogue with aux needs an aux pointer and a batch of 1",
           "pass epilogue_operands::aux, or epilogue::gelu/bias_gelu");
    const void* addend = e.addend != nullptr && s.beta != 0 ? e.addend : c;
    // A batch's later operands lie at their strides from these pointers: their alignment counts too.
    const auto element_bytes = [](element t) { return t == element::f64 ? 8 : t == element::f32 ? 4 : 2; };
    const auto strided = [&](const void* p, std::int64_t stride, element t) {
      return static_cast<const void*>(static_cast<const char*>(p) +
                                      (s.batch > 1 ? stride * element_bytes(t) : 0));
    };
    const std::uint32_t alignment = std::min(
        {detail::alignment_of(a), detail::alignment_of(b), detail::alignment_of(c),
         detail::alignment_of(addend), has_bias ? detail::alignment_of(e.bias) : 256u,
         has_aux ? detail::alignment_of(e.aux) : 256u, detail::alignment_of(strided(a, s.stride_a, s.a_type)),
         detail::alignment_of(strided(b, s.stride_b, s.b_type)),
         detail::alignment_of(strided(c, s.stride_c, s.c_type)),
         has_bias ? detail::alignment_of(strided(e.bias, s.stride_bias, s.c_type)) : 256u});
    plan* found = plan_for(s, alignment, what, may_decline);
    if (found == nullptr) return false;
    const plan& p = *found;
    if (has_bias)
      detail::check_cublas(cublasLtMatmulDescSetAttribute(p.op.value, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                          &e.bias, sizeof e.bias),
                           what + " (bias pointer)");
    if (has_aux)
      detail::check_cublas(cublasLtMatmulDescSetAttribute(
                               p.op.value, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof e.aux),
                           what + " (aux pointer)");
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt's first operand is B.
    const float alpha_f = static_cast<float>(s.alpha), beta_f = static_cast<float>(s.beta);
    const bool f64 = s.c_type == element::f64;
    const void* alpha = f64 ? static_cast<const void*>(&s.alpha) : &alpha_f;
    const void* beta = f64 ? static_cast<const void*>(&s.beta) : &beta_f;
    const auto launch = [&](const cublasLtMatmulAlgo_t& algo) {
      return cublasLtMatmul(handle_.value, p.op.value, alpha, b, p.a.value, a, p.b.value, beta, addend,
                            p.c.value, c, p.c.value, &algo, workspace_.data(), workspace_.size_bytes(),
                            stream);
    };
    // Running the product again changes nothing unless it adds to C itself.
    if (p.candidate_count > 0) choose(*found, stream, s.beta == 0 || addend != c, launch, what);
    const cublasStatus_t status = launch(p.algo);
    if (may_decline && status == CUBLAS_STATUS_NOT_SUPPORTED) {  // nothing ran: the caller computes it apart
      found->declined = true;
      return false;
    }
    detail::check_cublas(status, what + " (cublasLtMatmul)");
    return true;
  }

  std::size_t plans() const { return plans_.size(); }  // shapes planned so far
  const gemm_choice_report& choices() const { return report_; }
  gemm_choice choice() const { return choice_; }

 private:
  struct plan {
    detail::lt_handle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> op;
    detail::lt_handle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> a, b, c;
    cublasLtMatmulAlgo_t algo{};
    // cuBLASLt's answers, until the first call chooses among them (a plain array: nvcc's front end
    // fails on a std::vector of cuBLASLt's unnamed algorithm struct)
    cublasLtMatmulAlgo_t candidates[candidates_most]{};
    int candidate_count = 0;
    bool declined = false;  // try_run: cuBLASLt has no algorithm for this epilogue here
  };

  // Sets p.algo: the fastest candidate where timing is allowed (gemm_choice::timed, `repeatable`:
  // the caller's product may run several times, and a stream not being recorded into a CUDA graph);
  // otherwise, and for candidates that fail to launch, the heuristic's first answer. Each candidate
  // runs once to warm up, then five times, one run at a time after the L2 cache is overwritten (in
  // a step, the product's operands come mostly from memory, not from its own previous run); its
  // median counts. Another answer replaces the first only when 3 % faster: closer timings swap
  // places from run to run.
  template <class Launch>
  void choose(plan& p, cudaStream_t stream, bool repeatable, const Launch& launch, const std::string& what) {
    const int count = p.candidate_count;
    const cublasLtMatmulAlgo_t* candidates = p.candidates;
    p.candidate_count = 0;
    p.algo = candidates[0];
    const std::string timing = "cuda: " + what + " (timing cuBLASLt's answers)";
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(stream, &capture), timing.c_str());
    if (choice_ != gemm_choice::timed || !repeatable || capture != cudaStreamCaptureStatusNone || count < 2)
      return;
    constexpr int rounds = 5;
    detail::event_pair events;
    detail::cache_flush flush;
    std::vector<std::vector<double>> ms(static_cast<std::size_t>(count));
    std::vector<bool> runs(ms.size());
    for (std::size_t i = 0; i < ms.size(); ++i) runs[i] = launch(candidates[i]) == CUBLAS_STATUS_SUCCESS;
    for (int round = 0; round < rounds; ++round)
      for (std::size_t i = 0; i < ms.size(); ++i) {
        if (!runs[i]) continue;
        flush.overwrite(stream);
        check_cuda(cudaEventRecord(events.start, stream), timing.c_str());
        static_cast<void>(launch(candidates[i]));
        check_cuda(cudaEventRecord(events.stop, stream), timing.c_str());
        check_cuda(cudaEventSynchronize(events.stop), timing.c_str());
        float elapsed = 0;
        check_cuda(cudaEventElapsedTime(&elapsed, events.start, events.stop), timing.c_str());
        ms[i].push_back(elapsed);
      }
    if (!runs.front()) return;  // the first answer is what runs next and reports its failure
    std::vector<double> median(ms.size());
    for (std::size_t i = 0; i < ms.size(); ++i) {
      if (!runs[i]) continue;
      std::sort(ms[i].begin(), ms[i].end());
      median[i] = ms[i][ms[i].size() / 2];
    }
    std::size_t fastest = 0;
    for (std::size_t i = 1; i < ms.size(); ++i)
      if (runs[i] && median[i] < median[fastest]) fastest = i;
    if (median[fastest] > 0.97 * median.front()) fastest = 0;
    p.algo = candidates[fastest];
    report_.plans.push_back({what, median.front(), median[fastest]});
  }
  using plan_key = std::tuple<std::int64_t, std::int64_t, std::int64_t, int, int, std::uint32_t, std::int64_t,
                              std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, bool>;

  static void set_batch(cublasLtMatrixLayout_t layout, std::int64_t batch, std::int64_t stride,
                        const std::string& what) {
    if (batch == 1) return;
    const std::int32_t count = static_cast<std::int32_t>(batch);
    detail::check_cublas(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
        what + " (batch count)");
    detail::check_cublas(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                          &stride, sizeof stride),
                         what + " (batch stride)");
  }

  plan* plan_for(const matmul_problem& s, std::uint32_t alignment, const std::string& what,
                 bool may_decline) {
    const int types =
        static_cast<int>(s.a_type) * 16 + static_cast<int>(s.b_type) * 4 + static_cast<int>(s.c_type);
    const int transposes = (s.transpose_a ? 1 : 0) + (s.transpose_b ? 2 : 0);
    const plan_key key{s.m,           s.n,        s.k,        types,      static_cast<int>(s.post),
                       alignment,     s.batch,    s.stride_a, s.stride_b, s.stride_c,
                       s.stride_bias, transposes, s.beta != 0};
    if (const auto it = plans_.find(key); it != plans_.end())
      return it->second->declined ? nullptr : it->second.get();
    auto p = std::make_unique<plan>();
    describe_operation(*p, s, what);
    describe_layouts(*p, s, what);
    cublasLtMatmulHeuristicResult_t answers[candidates_most]{};
    int found = 0;
    const cublasStatus_t status = ask_heuristic(*p, alignment, answers, found, what);
    if (may_decline && (found == 0 || status == CUBLAS_STATUS_NOT_SUPPORTED)) {
      p->declined = true;
      plans_.emplace(key, std::move(p));
      return nullptr;
    }
    detail::check_cublas(status, what + " (cublasLtMatmulAlgoGetHeuristic)");
    if (found == 0)
      fail("cuda: " + what,
           "cuBLASLt has no algorithm for these sizes, types, this epilogue and " +
               std::to_string(alignment) + "-byte aligned pointers",
           "pad the dimensions to multiples of 8 and align the buffers to 16 bytes, or use epilogue::none");
    for (int i = 0; i < found; ++i)
      if (answers[i].state == CUBLAS_STATUS_SUCCESS) p->candidates[p->candidate_count++] = answers[i].algo;
    if (p->candidate_count == 0) p->candidates[p->candidate_count++] = answers[0].algo;
    p->algo = p->candidates[0];
    return plans_.emplace(key, std::move(p)).first->second.get();
  }

  // The plan's operation: its compute type, the transposes, the epilogue and what it reads.
  static void describe_operation(plan& p, const matmul_problem& s, const std::string& what) {
    const bool f64 = s.c_type == element::f64;
    if (f64 && (s.a_type != element::f64 || s.b_type != element::f64))
      fail("cuda: " + what, "an f64 product needs f64 inputs", "convert the inputs to f64 first");
    detail::check_cublas(cublasLtMatmulDescCreate(&p.op.value, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F,
                                                  f64 ? CUDA_R_64F : CUDA_R_32F),
                         what + " (cublasLtMatmulDescCreate)");
    // cuBLASLt's first operand is our B, its second our A (see run).
    const cublasOperation_t first = s.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t second = s.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    detail::check_cublas(
        cublasLtMatmulDescSetAttribute(p.op.value, CUBLASLT_MATMUL_DESC_TRANSA, &first, sizeof first),
        what + " (transpose of B)");
    detail::check_cublas(
        cublasLtMatmulDescSetAttribute(p.op.value, CUBLASLT_MATMUL_DESC_TRANSB, &second, sizeof second),
        what + " (transpose of A)");
    const cublasLtEpilogue_t e = detail::lt_epilogue(s.post);
    detail::check_cublas(
        cublasLtMatmulDescSetAttribute(p.op.value, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e),
        what + " (epilogue)");
    const cudaDataType_t c_type = detail::data_type(s.c_type);
    if (detail::uses_bias_pointer(s.post))
      detail::check_cublas(cublasLtMatmulDescSetAttribute(p.op.value, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                          &c_type, sizeof c_type),
                           what + " (bias type)");
    if (detail::uses_bias_pointer(s.post) && s.batch > 1)
      detail::check_cublas(cublasLtMatmulDescSetAttribute(p.op.value, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                                          &s.stride_bias, sizeof s.stride_bias),
                           what + " (bias batch stride)");
    if (detail::uses_aux_pointer(s.post)) {  // aux has C's column-major shape (n, m): leading dimension n
      const std::int64_t aux_ld = s.n;
      detail::check_cublas(cublasLtMatmulDescSetAttribute(p.op.value, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                          &aux_ld, sizeof aux_ld),
                           what + " (aux leading dimension)");
    }
  }

  // The plan's matrix layouts, batched at the problem's strides.
  static void describe_layouts(plan& p, const matmul_problem& s, const std::string& what) {
    const cudaDataType_t c_type = detail::data_type(s.c_type);
    // Column-major views: B as stored is (n, k) ld n, or (k, n) ld k when transposed; A is (k, m)
    // ld k, or (m, k) ld m; C is (n, m) ld n.
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    if (s.transpose_b)
      detail::check_cublas(
          cublasLtMatrixLayoutCreate(&p.a.value, detail::data_type(s.b_type), u(s.k), u(s.n), s.k),
          what + " (layout of B)");
    else
      detail::check_cublas(
          cublasLtMatrixLayoutCreate(&p.a.value, detail::data_type(s.b_type), u(s.n), u(s.k), s.n),
          what + " (layout of B)");
    if (s.transpose_a)
      detail::check_cublas(
          cublasLtMatrixLayoutCreate(&p.b.value, detail::data_type(s.a_type), u(s.m), u(s.k), s.m),
          what + " (layout of A)");
    else
      detail::check_cublas(
          cublasLtMatrixLayoutCreate(&p.b.value, detail::data_type(s.a_type), u(s.k), u(s.m), s.k),
          what + " (layout of A)");
    detail::check_cublas(cublasLtMatrixLayoutCreate(&p.c.value, c_type, u(s.n), u(s.m), s.n),
                         what + " (layout of C)");
    set_batch(p.a.value, s.batch, s.stride_b, what);
    set_batch(p.b.value, s.batch, s.stride_a, what);
    set_batch(p.c.value, s.batch, s.stride_c, what);
  }

  // cuBLASLt's heuristic answers for the plan (as many as gemm_choice asks), for the workspace and
  // the pointers' alignment; `found` of them are in `answers`.
  cublasStatus_t ask_heuristic(const plan& p, std::uint32_t alignment,
                               cublasLtMatmulHeuristicResult_t (&answers)[candidates_most], int& found,
                               const std::string& what) {
    detail::lt_handle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> preference;
    detail::check_cublas(cublasLtMatmulPreferenceCreate(&preference.value), what + " (preference)");
    const std::uint64_t bytes = workspace_.size_bytes();
    detail::check_cublas(
        cublasLtMatmulPreferenceSetAttribute(preference.value, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &bytes, sizeof bytes),
        what + " (workspace)");
    // The algorithm must suit every call with this key, so it is chosen for the pointers' alignment.
    for (const auto attribute :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      detail::check_cublas(
          cublasLtMatmulPreferenceSetAttribute(preference.value, attribute, &alignment, sizeof alignment),
          what + " (alignment)");
    const int wanted = choice_ == gemm_choice::timed ? candidates_ : 1;
    return cublasLtMatmulAlgoGetHeuristic(handle_.value, p.op.value, p.a.value, p.b.value, p.c.value,
                                          p.c.value, preference.value, wanted, answers, &found);
  }

  // 0: candidates_timed, or SHARDGRAPH_CUDA_GEMM_CANDIDATES where set
  static int candidates_chosen(int asked) {
    const std::string range = "give 1 to " + std::to_string(candidates_most);
    const char* v = std::getenv("SHARDGRAPH_CUDA_GEMM_CANDIDATES");
    if (asked == 0 && v != nullptr && *v != '\0') {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (*end != '\0' || n < 1 || n > candidates_most)
        fail("gemm_runner", std::string("SHARDGRAPH_CUDA_GEMM_CANDIDATES is \"") + v + "\"", range);
      return static_cast<int>(n);
    }
    if (asked == 0) return candidates_timed;
    if (asked < 1 || asked > candidates_most)
      fail("gemm_runner", "the number of cuBLASLt answers to time is " + std::to_string(asked), range);
    return asked;
  }

  detail::lt_handle<cublasLtHandle_t, cublasLtDestroy> handle_;
  device_buffer workspace_;
  gemm_choice choice_;
  int candidates_;
  gemm_choice_report report_;
  std::map<plan_key, std::unique_ptr<plan>> plans_;
};

}  // namespace shardgraph::cuda
