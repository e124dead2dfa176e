// attention_cuda: flash attention (kernels/flash_attention.cuh) alone, causal, bf16, head_dim 64, on
// the token-major layout the trainer uses: median forward and backward (reading the forward's
// result and log-sum-exp, as in training) times over --repeat runs (CUDA events) and TFLOP/s; and
// where the build has cuDNN (SHARDGRAPH_CUDA_CUDNN), cuDNN's fused attention (cudnn_attention.hpp)
// on the same inputs ("impl": "cudnn"), the two outputs compared. One JSON line per shape and
// implementation; bench/attention_pytorch.py times torch's scaled_dot_product_attention on the
// same shapes.
//
//   attention_cuda [--repeat 20]
//
// FLOPs counted: 4 B H T^2 d / 2 for the causal forward (two products over half the scores), 2.5x
// that for the backward (five products), as FlashAttention's papers count them.
#include <shardgraph/cuda/check.hpp>
#include <shardgraph/cuda/kernels/flash_attention.cuh>
#if SHARDGRAPH_CUDA_CUDNN
#include <shardgraph/cuda/cudnn_attention.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sg = shardgraph;
namespace flash = sg::cuda::kernels::flash;
using bf16 = __nv_bfloat16;

namespace {

struct problem {
  const char* model;
  int batch, heads, seq;
};

template <class T>
struct device_array {
  T* data = nullptr;
  std::size_t size = 0;
  explicit device_array(std::size_t n) : size(n) {
    sg::cuda::check_cuda(cudaMalloc(&data, n * sizeof(T)), "attention_cuda (cudaMalloc)");
  }
  device_array(device_array&& other) noexcept : data(std::exchange(other.data, nullptr)), size(other.size) {}
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() { cudaFree(data); }
};

device_array<bf16> random_array(std::size_t n, std::uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(-1.5f, 1.5f);
  std::vector<bf16> host(n);
  for (bf16& x : host) x = __float2bfloat16(uniform(engine));
  device_array<bf16> array(n);
  sg::cuda::check_cuda(cudaMemcpy(array.data, host.data(), n * sizeof(bf16), cudaMemcpyHostToDevice),
                       "attention_cuda (cudaMemcpy)");
  return array;
}

double median_ms(const std::function<void()>& run, int repeat) {
  cudaEvent_t start, stop;
  sg::cuda::check_cuda(cudaEventCreate(&start), "attention_cuda (cudaEventCreate)");
  sg::cuda::check_cuda(cudaEventCreate(&stop), "attention_cuda (cudaEventCreate)");
  for (int i = 0; i < 3; ++i) run();  // warm up: clocks, caches
  std::vector<double> times;
  for (int i = 0; i < repeat; ++i) {
    sg::cuda::check_cuda(cudaEventRecord(start), "attention_cuda (cudaEventRecord)");
    run();
    sg::cuda::check_cuda(cudaEventRecord(stop), "attention_cuda (cudaEventRecord)");
    sg::cuda::check_cuda(cudaEventSynchronize(stop), "attention_cuda (cudaEventSynchronize)");
    float ms = 0;
    sg::cuda::check_cuda(cudaEventElapsedTime(&ms, start, stop), "attention_cuda (cudaEventElapsedTime)");
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void print_result(const char* impl, const problem& p, double forward_ms, double backward_ms) {
  const double forward_flop = 4.0 * p.batch * p.heads * double(p.seq) * p.seq * flash::head_dim / 2;
  std::printf(
      "{\"bench\": \"attention\", \"impl\": \"%s\", \"model\": \"%s\", \"batch\": %d, "
      "\"heads\": %d, \"seq\": %d, \"head_dim\": %d, \"forward_ms\": %.4f, \"forward_tflops\": %.1f, "
      "\"backward_ms\": %.4f, \"backward_tflops\": %.1f}\n",
      impl, p.model, p.batch, p.heads, p.seq, flash::head_dim, forward_ms, forward_flop / forward_ms / 1e9,
      backward_ms, 2.5 * forward_flop / backward_ms / 1e9);
  std::fflush(stdout);
}

#if SHARDGRAPH_CUDA_CUDNN
std::vector<float> to_host(const device_array<bf16>& a) {
  std::vector<bf16> bits(a.size);
  sg::cuda::check_cuda(cudaMemcpy(bits.data(), a.data, a.size * sizeof(bf16), cudaMemcpyDeviceToHost),
                       "attention_cuda (cudaMemcpy)");
  std::vector<float> values(a.size);
  for (std::size_t i = 0; i < a.size; ++i) values[i] = __bfloat162float(bits[i]);
  return values;
}

// The largest |a - b| over the largest |a|.
double relative_difference(const device_array<bf16>& a, const device_array<bf16>& b) {
  const std::vector<float> x = to_host(a), y = to_host(b);
  double largest = 0, difference = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    largest = std::max(largest, std::abs(double(x[i])));
    difference = std::max(difference, std::abs(double(x[i]) - double(y[i])));
  }
  return difference / largest;
}
#endif

void run_problem(const problem& p, int repeat) {
  const std::size_t numel = static_cast<std::size_t>(p.batch) * p.heads * p.seq * flash::head_dim;
  const std::size_t rows = static_cast<std::size_t>(p.batch) * p.heads * p.seq;
  const auto q = random_array(numel, 1), k = random_array(numel, 2), v = random_array(numel, 3),
             dout = random_array(numel, 4);
  device_array<bf16> out(numel), dq(numel), dk(numel), dv(numel);
  device_array<float> lse(rows), delta(rows);
  const double scale = 1 / std::sqrt(double(flash::head_dim));
  const flash::shape s{.batch = p.batch,
                       .heads = p.heads,
                       .kv_heads = p.heads,
                       .seq = p.seq,
                       .scale = static_cast<float>(scale),
                       .scale_log2 = static_cast<float>(scale * 1.4426950408889634),
                       .token_major = true};
  const auto forward = [&] { flash::forward(q.data, k.data, v.data, out.data, lse.data, s, nullptr); };
  const auto backward = [&] {
    flash::backward(q.data, k.data, v.data, dout.data, dq.data, dk.data, dv.data, out.data, lse.data,
                    delta.data, s, nullptr, true);
  };
  const double forward_ms = median_ms(forward, repeat);
  forward();
  const double backward_ms = median_ms(backward, repeat);
  sg::cuda::check_cuda(cudaDeviceSynchronize(), "attention_cuda (flash attention)");
  print_result("shardgraph", p, forward_ms, backward_ms);
#if SHARDGRAPH_CUDA_CUDNN
  sg::cuda::cudnn_attention cudnn;
  const sg::cuda::cudnn_attention::shape c{.batch = p.batch,
                                           .heads = p.heads,
                                           .seq = p.seq,
                                           .head_dim = flash::head_dim,
                                           .type = sg::dtype::bf16,
                                           .token_major = true,
                                           .scale = scale};
  device_array<char> workspace(
      std::max({cudnn.forward_workspace(c), cudnn.backward_workspace(c), std::size_t{256}}));
  device_array<bf16> cudnn_out(numel), cudnn_dq(numel), cudnn_dk(numel), cudnn_dv(numel);
  device_array<float> statistics(rows);
  const auto cudnn_forward = [&] {
    cudnn.forward(c, q.data, k.data, v.data, cudnn_out.data, statistics.data, workspace.data, nullptr);
  };
  const auto cudnn_backward = [&] {
    cudnn.backward(c, q.data, k.data, v.data, cudnn_out.data, dout.data, statistics.data, cudnn_dq.data,
                   cudnn_dk.data, cudnn_dv.data, workspace.data, nullptr);
  };
  const double cudnn_forward_ms = median_ms(cudnn_forward, repeat);
  cudnn_forward();
  const double cudnn_backward_ms = median_ms(cudnn_backward, repeat);
  sg::cuda::check_cuda(cudaDeviceSynchronize(), "attention_cuda (cuDNN attention)");
  print_result("cudnn", p, cudnn_forward_ms, cudnn_backward_ms);
  std::printf(
      "{\"bench\": \"attention_agreement\", \"model\": \"%s\", \"out\": %.2e, \"dq\": %.2e, "
      "\"dk\": %.2e, \"dv\": %.2e, \"cudnn_backward_deterministic\": %s}\n",
      p.model, relative_difference(out, cudnn_out), relative_difference(dq, cudnn_dq),
      relative_difference(dk, cudnn_dk), relative_difference(dv, cudnn_dv),
      cudnn.backward_deterministic(c) ? "true" : "false");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    if (a == "--repeat") {
      repeat = std::max(1, std::stoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "shardgraph: attention_cuda: unknown option '%s'. Use --repeat N\n", argv[i]);
      return 2;
    }
  }
  // GPT-2 124M and 350M at B=16, T=1024
  for (const problem& p : {problem{"124M", 16, 12, 1024}, problem{"350M", 16, 16, 1024}})
    run_problem(p, repeat);
  return 0;
}
