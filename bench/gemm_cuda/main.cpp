// gemm_cuda: cuda::gemm_runner on the linear layers of GPT-2 124M at B=16, T=1024 (M = 16384 rows),
// bf16, with and without the fused epilogue: median time over --repeat runs (CUDA events) and
// TFLOP/s, with cuBLASLt's first heuristic answer ("choice": "heuristic") and with the fastest of its
// first answers ("timed", the backend's default). One JSON line per shape and choice;
// bench/gemm_pytorch.py times torch on the same shapes. Then the backward's products as the cuda
// backend runs them (timed choice): each layer's input gradient dy w^T and weight gradient x^T dy,
// with and without the epilogue the step fuses into it (the bias gradient; GELU's gradient), and
// q, k and v's input gradient as three accumulating products against one over the three widths.
// Then q, k and v (124M's and 350M's widths) as three products against one batched call, forward
// and weight gradients.
//
//   gemm_cuda [--repeat 50] [--rows 16384]
#include <shardgraph/core/half_types.hpp>
#include <shardgraph/cuda.hpp>
#include <shardgraph/cuda/gemm.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace sg = shardgraph;
using sg::cuda::element;
using sg::cuda::epilogue;

namespace {

struct layer {
  const char* name;
  std::int64_t in, out;
  epilogue post;
};

// Median ms of `repeat` runs of fn() on the default stream, after 5 to warm up (heuristics, clocks).
template <class Fn>
double median_ms_of(const Fn& fn, int repeat) {
  cudaEvent_t start, stop;
  sg::cuda::check_cuda(cudaEventCreate(&start), "gemm_cuda (cudaEventCreate)");
  sg::cuda::check_cuda(cudaEventCreate(&stop), "gemm_cuda (cudaEventCreate)");
  for (int i = 0; i < 5; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < repeat; ++i) {
    sg::cuda::check_cuda(cudaEventRecord(start), "gemm_cuda (cudaEventRecord)");
    fn();
    sg::cuda::check_cuda(cudaEventRecord(stop), "gemm_cuda (cudaEventRecord)");
    sg::cuda::check_cuda(cudaEventSynchronize(stop), "gemm_cuda (cudaEventSynchronize)");
    float ms = 0;
    sg::cuda::check_cuda(cudaEventElapsedTime(&ms, start, stop), "gemm_cuda (cudaEventElapsedTime)");
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double median_ms(sg::cuda::gemm_runner& gemm, const sg::cuda::gemm_shape& s, const void* x, const void* w,
                 const void* b, void* y, int repeat) {
  return median_ms_of([&] { gemm.run(s, x, w, b, y); }, repeat);
}

// Attention's q, k and v products of one x (model -> model each): three calls against one strided
// batched call (x at stride 0), forward with the bias and weight gradient with the bias gradient,
// as the cuda backend runs them under products_batched.
void batched_qkv(sg::cuda::gemm_runner& gemm, std::int64_t rows, std::int64_t model, int repeat) {
  const std::size_t bytes = 2;
  const std::int64_t w = model * model, y = rows * model;
  sg::cuda::device_buffer x(static_cast<std::size_t>(rows * model) * bytes), ws(3 * w * bytes),
      bs(3 * model * bytes), ys(3 * y * bytes);
  for (sg::cuda::device_buffer* b : {&x, &ws, &bs, &ys})
    sg::cuda::check_cuda(cudaMemset(b->data(), 0x3c, b->size_bytes()), "gemm_cuda (cudaMemset)");
  const auto at = [&](sg::cuda::device_buffer& b, std::int64_t elements) {
    return static_cast<char*>(b.data()) + elements * static_cast<std::int64_t>(bytes);
  };
  for (const bool forward : {true, false}) {
    // forward: y_i = x w_i + b_i; backward: dw_i = x^T dy_i with db_i (dy_i in ys, dw_i in ws)
    sg::cuda::matmul_problem p =
        forward
            ? sg::cuda::matmul_problem{.m = rows, .n = model, .k = model, .post = epilogue::bias}
            : sg::cuda::matmul_problem{
                  .m = model, .n = model, .k = rows, .transpose_a = true, .post = epilogue::bias_grad_of_b};
    p.a_type = p.b_type = p.c_type = element::bf16;
    const auto three = [&] {
      for (std::int64_t i = 0; i < 3; ++i)
        gemm.run(p, x.data(), forward ? at(ws, i * w) : at(ys, i * y),
                 forward ? at(ys, i * y) : at(ws, i * w), at(bs, i * model), nullptr,
                 forward ? "q, k, v forward" : "q, k, v weight gradients");
    };
    sg::cuda::matmul_problem batch = p;
    batch.batch = 3;
    batch.stride_b = forward ? w : y;
    batch.stride_c = forward ? y : w;
    batch.stride_bias = model;
    const auto batched = [&] {
      gemm.run(batch, x.data(), forward ? ws.data() : ys.data(), forward ? ys.data() : ws.data(), bs.data(),
               nullptr, forward ? "q, k, v forward (batched)" : "q, k, v weight gradients (batched)");
    };
    const double apart_ms = median_ms_of(three, repeat), batched_ms = median_ms_of(batched, repeat);
    std::printf(
        "{\"bench\": \"gemm_cuda\", \"layer\": \"q, k, v %s\", \"m\": %lld, \"model\": %lld, \"type\": "
        "\"bf16\", \"three_calls_ms\": %.4f, \"batched_ms\": %.4f, \"speedup\": %.3f}\n",
        forward ? "forward + bias" : "weight gradients + bias gradients", static_cast<long long>(rows),
        static_cast<long long>(model), apart_ms, batched_ms, apart_ms / batched_ms);
    std::fflush(stdout);
  }
}

const char* epilogue_name(epilogue post) {
  switch (post) {
    case epilogue::none:
      return "none";
    case epilogue::bias:
      return "bias";
    case epilogue::bias_gelu:
      return "bias+gelu";
    case epilogue::bias_grad_of_b:
      return "bias gradient";
    case epilogue::gelu_grad:
      return "gelu gradient";
    case epilogue::gelu_grad_bias_grad:
      return "gelu gradient + bias gradient";
    default:
      return "other";
  }
}

// A bf16 product C (m, n) = op(A) op(B) (see cuda::matmul_problem).
sg::cuda::matmul_problem bf16_product(std::int64_t m, std::int64_t n, std::int64_t k, bool transpose_a,
                                      bool transpose_b, epilogue post = epilogue::none) {
  return {.m = m,
          .n = n,
          .k = k,
          .transpose_a = transpose_a,
          .transpose_b = transpose_b,
          .a_type = element::bf16,
          .b_type = element::bf16,
          .c_type = element::bf16,
          .post = post};
}

// A layer's backward products: dx (rows, in) = dy (rows, out) w^T, w stored (in, out); and
// dw (in, out) = x^T dy, with db = dy's column sums in the epilogue. mlp.c_proj's input gradient
// also runs with GELU's gradient (aux: c_fc's pre-activation, (rows, in)), as the step makes c_fc's
// dy, and with c_fc's bias gradient besides (dy's column sums, in values). q, k and v's input
// gradient adds three (model, model) products into one dx, or makes it as one product over the
// three (dy (rows, 3 model) against the three weights stacked).
void backward_products(sg::cuda::gemm_runner& gemm, const std::vector<layer>& layers, std::int64_t rows,
                       int repeat) {
  const std::int64_t bytes = 2;
  for (const layer& l : layers) {
    sg::cuda::device_buffer x(static_cast<std::size_t>(rows * l.in * bytes)),
        w(static_cast<std::size_t>(l.in * l.out * bytes)), dy(static_cast<std::size_t>(rows * l.out * bytes)),
        dx(static_cast<std::size_t>(rows * l.in * bytes)), dw(static_cast<std::size_t>(l.in * l.out * bytes)),
        db(static_cast<std::size_t>(std::max(l.in, l.out) * bytes));
    for (sg::cuda::device_buffer* b : {&x, &w, &dy, &dx})
      sg::cuda::check_cuda(cudaMemset(b->data(), 0x3c, b->size_bytes()), "gemm_cuda (cudaMemset)");
    const double flop =
        2.0 * static_cast<double>(rows) * static_cast<double>(l.in) * static_cast<double>(l.out);
    const auto report = [&](const char* product, epilogue post, double ms) {
      std::printf(
          "{\"bench\": \"gemm_cuda\", \"layer\": \"%s\", \"product\": \"%s\", \"m\": %lld, \"k\": %lld, "
          "\"n\": %lld, \"type\": \"bf16\", \"epilogue\": \"%s\", \"choice\": \"timed\", \"median_ms\": "
          "%.4f, \"tflops\": %.1f}\n",
          l.name, product, static_cast<long long>(rows), static_cast<long long>(l.in),
          static_cast<long long>(l.out), epilogue_name(post), ms, flop / (ms * 1e-3) / 1e12);
      std::fflush(stdout);
    };
    std::vector<epilogue> input_posts{epilogue::none};
    if (l.post == epilogue::bias && l.in > l.out)  // mlp.c_proj: c_fc's dy, and its bias gradient
      input_posts.insert(input_posts.end(), {epilogue::gelu_grad, epilogue::gelu_grad_bias_grad});
    for (epilogue post : input_posts) {
      const sg::cuda::matmul_problem p = bf16_product(rows, l.in, l.out, false, true, post);
      report("input gradient", post,
             median_ms_of(
                 [&] {
                   gemm.run(p, dy.data(), w.data(), dx.data(), {.bias = db.data(), .aux = x.data()}, nullptr,
                            "input gradient");
                 },
                 repeat));
    }
    std::vector<epilogue> weight_posts{epilogue::none};
    if (l.post != epilogue::none) weight_posts.push_back(epilogue::bias_grad_of_b);
    for (epilogue post : weight_posts) {
      const sg::cuda::matmul_problem p = bf16_product(l.in, l.out, rows, true, false, post);
      report("weight gradient", post,
             median_ms_of(
                 [&] {
                   gemm.run(p, x.data(), dy.data(), dw.data(), {.bias = db.data()}, nullptr,
                            "weight gradient");
                 },
                 repeat));
    }
    if (l.out != 3 * l.in) continue;  // q, k and v's input gradient: three products against one
    const std::int64_t model = l.in;
    sg::cuda::matmul_problem one = bf16_product(rows, model, model, false, true);
    const auto three = [&] {
      // dy_i: (rows, model) at stride rows * model in dy; w_i: (model, model) at stride model^2 in w
      for (std::int64_t i = 0; i < 3; ++i) {
        one.beta = i == 0 ? 0 : 1;
        gemm.run(one, static_cast<char*>(dy.data()) + i * rows * model * bytes,
                 static_cast<char*>(w.data()) + i * model * model * bytes, dx.data(), {}, nullptr,
                 "q, k, v input gradient (three)");
      }
    };
    const double three_ms = median_ms_of(three, repeat);
    const sg::cuda::matmul_problem stacked = bf16_product(rows, model, 3 * model, false, false);
    const double one_ms = median_ms_of(
        [&] {
          gemm.run(stacked, dy.data(), w.data(), dx.data(), {}, nullptr, "q, k, v input gradient (one)");
        },
        repeat);
    std::printf(
        "{\"bench\": \"gemm_cuda\", \"layer\": \"q, k, v input gradient\", \"m\": %lld, \"model\": %lld, "
        "\"type\": \"bf16\", \"three_calls_ms\": %.4f, \"one_product_ms\": %.4f, \"speedup\": %.3f}\n",
        static_cast<long long>(rows), static_cast<long long>(model), three_ms, one_ms, three_ms / one_ms);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 50;
  std::int64_t rows = 16384;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    if (a == "--repeat")
      repeat = std::max(1, std::stoi(argv[i + 1]));
    else if (a == "--rows")
      rows = std::stoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "shardgraph: gemm_cuda: unknown option %s. see bench/gemm_cuda/main.cpp\n",
                   argv[i]);
      return 2;
    }
  }
  if (!sg::cuda::has_device()) {
    std::fprintf(stderr, "shardgraph: gemm_cuda: no CUDA device is visible. run it on a GPU machine\n");
    return 1;
  }
  try {
    const std::vector<layer> layers = {{"attn.c_attn (qkv)", 768, 2304, epilogue::bias},
                                       {"attn.c_proj", 768, 768, epilogue::bias},
                                       {"mlp.c_fc + gelu", 768, 3072, epilogue::bias_gelu},
                                       {"mlp.c_proj", 3072, 768, epilogue::bias},
                                       {"lm_head", 768, 50304, epilogue::none}};
    sg::cuda::gemm_runner heuristic(sg::cuda::gemm_choice::heuristic), timed(sg::cuda::gemm_choice::timed);
    for (const layer& l : layers) {
      const std::int64_t bytes = 2;
      sg::cuda::device_buffer x(static_cast<std::size_t>(rows * l.in * bytes)),
          w(static_cast<std::size_t>(l.in * l.out * bytes)), b(static_cast<std::size_t>(l.out * bytes)),
          y(static_cast<std::size_t>(rows * l.out * bytes));
      sg::cuda::check_cuda(cudaMemset(x.data(), 0x3c, x.size_bytes()),
                           "gemm_cuda (cudaMemset)");  // bf16 ~0.01
      sg::cuda::check_cuda(cudaMemset(w.data(), 0x3c, w.size_bytes()), "gemm_cuda (cudaMemset)");
      sg::cuda::check_cuda(cudaMemset(b.data(), 0, b.size_bytes()), "gemm_cuda (cudaMemset)");
      std::vector<epilogue> posts{epilogue::none};
      if (l.post != epilogue::none) posts.push_back(l.post);
      for (epilogue post : posts)
        for (sg::cuda::gemm_runner* gemm : {&heuristic, &timed}) {
          const sg::cuda::gemm_shape s{rows, l.out, l.in, element::bf16, post};
          const double ms = median_ms(*gemm, s, x.data(), w.data(), b.data(), y.data(), repeat);
          const double flop =
              2.0 * static_cast<double>(rows) * static_cast<double>(l.in) * static_cast<double>(l.out);
          std::printf(
              "{\"bench\": \"gemm_cuda\", \"layer\": \"%s\", \"m\": %lld, \"k\": %lld, \"n\": %lld, "
              "\"type\": "
              "\"bf16\", "
              "\"epilogue\": \"%s\", \"choice\": \"%s\", \"median_ms\": %.4f, \"tflops\": %.1f}\n",
              l.name, static_cast<long long>(rows), static_cast<long long>(l.in),
              static_cast<long long>(l.out), epilogue_name(post), gemm == &timed ? "timed" : "heuristic", ms,
              flop / (ms * 1e-3) / 1e12);
          std::fflush(stdout);
        }
    }
    backward_products(timed, layers, rows, repeat);
    for (const std::int64_t model : {768, 1024}) batched_qkv(timed, rows, model, repeat);
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
