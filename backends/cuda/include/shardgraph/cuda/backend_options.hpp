#pragma once
// backend_options: what a cuda::backend is asked for at construction, and the environment variables
// that override each choice (read once, when the backend is made). A variable set to a value it does
// not know fails with the values it takes.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/gemm.hpp>
#include <shardgraph/cuda/text.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace shardgraph::cuda {

struct backend_options {
  bool host_visible = false;  // managed memory, for host-side communicators
  int device = -1;            // -1: the current device
  bool profile = false;       // time every op on the GPU (also: SHARDGRAPH_CUDA_PROFILE=1); see profile()
  // The executor records a run of its program as one CUDA graph and replays it (runtime/
  // step_recording.hpp); false (or SHARDGRAPH_CUDA_GRAPHS=0) runs every op by its own launch.
  bool graphs = true;
  // Causal 16-bit attention on cuDNN's fused flash attention where it applies (built with cuDNN:
  // SHARDGRAPH_CUDA_CUDNN) rather than shardgraph's own kernels; false (or
  // SHARDGRAPH_CUDA_ATTENTION=flash) keeps the own kernels everywhere.
  bool cudnn_attention = true;
  // A GEMM plan's algorithm: the fastest of cuBLASLt's first answers, timed at its first call
  // (gemm.hpp); heuristic (or SHARDGRAPH_CUDA_GEMM_CHOICE=heuristic) takes the first answer, the
  // same in every run, for bitwise-repeatable runs.
  gemm_choice gemm = gemm_choice::timed;
  // A linear's bias gradient (dy's column sums) in its weight product's epilogue (cuBLASLt's
  // BGRADA/B), or (false, the default) by the column-sum kernels after the product alone: the
  // epilogue slows the weight products by more than reading dy again costs (bench/RESULTS.md).
  // SHARDGRAPH_CUDA_BIAS_GRAD=product|apart overrides it.
  bool bias_grad_in_product = false;
};

// GPU time per op (profile mode): calls and total milliseconds, by op name and output dtype.
struct op_time {
  std::string name;
  std::int64_t calls = 0;
  double ms = 0;
};

namespace detail {

inline bool profile_requested(bool option) {
  const char* v = std::getenv("SHARDGRAPH_CUDA_PROFILE");
  return option || (v != nullptr && std::string_view(v) != "" && std::string_view(v) != "0");
}
inline bool cudnn_attention_chosen(bool option) {
  const char* v = std::getenv("SHARDGRAPH_CUDA_ATTENTION");
  if (v != nullptr && std::string_view(v) != "" && std::string_view(v) != "flash" &&
      std::string_view(v) != "cudnn")
    fail("cuda::backend", text("SHARDGRAPH_CUDA_ATTENTION is \"", v, "\""),
         "set it to cudnn (cuDNN's fused attention where it applies) or flash (shardgraph's kernels)");
  if (v != nullptr && std::string_view(v) != "") return std::string_view(v) == "cudnn";
  return option;
}
inline gemm_choice gemm_choice_chosen(gemm_choice option) {
  const char* v = std::getenv("SHARDGRAPH_CUDA_GEMM_CHOICE");
  if (v == nullptr || std::string_view(v) == "") return option;
  if (std::string_view(v) == "timed") return gemm_choice::timed;
  if (std::string_view(v) == "heuristic") return gemm_choice::heuristic;
  fail("cuda::backend", text("SHARDGRAPH_CUDA_GEMM_CHOICE is \"", v, "\""),
       "set it to timed (the fastest of cuBLASLt's first answers) or heuristic (its first answer)");
}
inline bool bias_grad_in_product_chosen(bool option) {
  const char* v = std::getenv("SHARDGRAPH_CUDA_BIAS_GRAD");
  if (v == nullptr || std::string_view(v) == "") return option;
  if (std::string_view(v) == "product" || std::string_view(v) == "apart")
    return std::string_view(v) == "product";
  fail("cuda::backend", text("SHARDGRAPH_CUDA_BIAS_GRAD is \"", v, "\""),
       "set it to product (in the weight product's epilogue) or apart (column sums after it)");
}
inline bool graphs_allowed(bool option) {
  const char* v = std::getenv("SHARDGRAPH_CUDA_GRAPHS");
  return option && (v == nullptr || std::string_view(v) != "0");
}

// The device a backend runs on: `requested` (made current), or the current one for -1.
inline int current_device(int requested) {
  if (requested >= 0) {
    check_cuda(cudaSetDevice(requested), "backend (cudaSetDevice)");
    return requested;
  }
  int d = 0;
  check_cuda(cudaGetDevice(&d), "backend (cudaGetDevice)");
  return d;
}

}  // namespace detail

}  // namespace shardgraph::cuda
