// memory_bound_cuda: the GPT-2 step's memory-bound kernels alone, through the cuda backend's calls
// (the kernels the trainer runs), bf16, 16384 tokens: the loss with the logits' gradient (in place,
// kernel_call::logits_grad) against the loss and its gradient apart (the gradient reading the kept
// log-sum-exp), the token table's gradient, a layer norm's three gradients with the residual add,
// the layer norm forward, and the token and position embeddings. Each call is recorded 10 times in
// one CUDA graph, which is replayed --repeat times: the median replay over 10 is a call's GPU time,
// without the host's launch work. One JSON line per kernel and width, with the bytes the call must
// move at least (each input read once, each output written once) over that time.
//
//   memory_bound_cuda [--repeat 20]
#include <shardgraph/compute/compute_backend.hpp>
#include <shardgraph/cuda/backend.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace sg = shardgraph;
using buffer = sg::cuda::backend::buffer;
using call = sg::compute::kernel_call<buffer>;
using sg::dtype;
using sg::op;

namespace {

constexpr std::int64_t tokens = 16384, vocab = 50304;  // GPT-2 at B=16, T=1024 (padded vocabulary)
constexpr int calls_per_replay = 10;

buffer random_buffer(sg::cuda::backend& gpu, dtype t, std::int64_t n, std::uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::vector<float> values(static_cast<std::size_t>(n));
  for (float& x : values) x = uniform(engine);
  buffer wide = gpu.allocate(dtype::f32, n), b = gpu.allocate(t, n);
  gpu.upload(wide, values.data());
  gpu.convert(wide, b);
  return b;
}
buffer ids_buffer(sg::cuda::backend& gpu, std::int64_t n, std::int64_t range, std::uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_int_distribution<std::int64_t> uniform(0, range - 1);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t& id : ids) id = uniform(engine);
  buffer b = gpu.allocate(dtype::i64, n);
  gpu.upload(b, ids.data());
  return b;
}
// A call of `kind` writing `out` from `inputs`, its dims in order.
call make_call(op kind, dtype type, buffer& out, std::initializer_list<const buffer*> inputs,
               std::initializer_list<std::int64_t> dims) {
  call c;
  c.kind = kind;
  c.type = type;
  c.out = &out;
  int k = 0;
  for (const buffer* in : inputs) c.in[k++] = in;
  k = 0;
  for (const std::int64_t d : dims) c.dims[k++] = d;
  return c;
}

// The median time of one run of `work` (the backend's calls), recorded 10 times into one graph.
double median_ms(sg::cuda::backend& gpu, const std::function<void()>& work, int repeat) {
  work();  // sizes the scratch memory before recording
  gpu.synchronize();
  gpu.begin_recording();
  for (int k = 0; k < calls_per_replay; ++k) work();
  std::optional<sg::cuda::backend::recording> graph = gpu.end_recording();
  if (!graph) {
    std::fprintf(stderr, "shardgraph: memory_bound_cuda: the calls could not be recorded: %s\n",
                 gpu.recording_failure().c_str());
    std::exit(1);
  }
  std::vector<double> ms;
  for (int r = 0; r < repeat + 2; ++r) {
    gpu.synchronize();
    const auto start = std::chrono::steady_clock::now();
    if (!gpu.replay(*graph)) {
      std::fprintf(stderr, "shardgraph: memory_bound_cuda: the recording's scratch memory moved\n");
      std::exit(1);
    }
    gpu.synchronize();
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    if (r >= 2) ms.push_back(took.count() / calls_per_replay);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double median_ms(sg::cuda::backend& gpu, const call& c, int repeat) {
  return median_ms(
      gpu, [&] { gpu.run(c); }, repeat);
}

void report(std::string_view kernel, std::string_view variant, std::int64_t cols, double ms, double bytes) {
  std::printf(
      "{\"bench\": \"memory_bound_cuda\", \"kernel\": \"%.*s\", \"variant\": \"%.*s\", \"rows\": %lld, "
      "\"cols\": %lld, \"ms\": %.4f, \"min_bytes_mb\": %.1f, \"tb_per_s\": %.2f}\n",
      static_cast<int>(kernel.size()), kernel.data(), static_cast<int>(variant.size()), variant.data(),
      static_cast<long long>(tokens), static_cast<long long>(cols), ms, bytes / 1e6, bytes / ms / 1e9);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else {
      std::fprintf(
          stderr,
          "shardgraph: memory_bound_cuda: unknown argument '%s'. usage: memory_bound_cuda [--repeat N]\n",
          argv[i]);
      return 2;
    }
  }
  if (repeat < 1) {
    std::fprintf(stderr, "shardgraph: memory_bound_cuda: --repeat must be at least 1\n");
    return 2;
  }
  try {
    sg::cuda::backend gpu;
    constexpr double bf16_bytes = 2;

    // ---- the loss and the logits' gradient (in place, as the memory plan puts it) -------------
    {
      buffer logits = random_buffer(gpu, dtype::bf16, tokens * vocab, 1);
      buffer targets = ids_buffer(gpu, tokens, vocab, 2);
      buffer loss = gpu.allocate(dtype::f32, 1), seed = gpu.allocate(dtype::f32, 1);
      const float one = 1;
      gpu.upload(seed, &one);
      call forward =
          make_call(op::cross_entropy, dtype::f32, loss, {&logits, &targets}, {tokens, vocab, vocab, tokens, -100});
      call gradient = make_call(op::cross_entropy_grad, dtype::bf16, logits, {&logits, &targets, &seed},
                                {tokens, vocab, vocab, tokens, -100});
      call together = forward;
      together.logits_grad = &logits;
      buffer saved = gpu.allocate(dtype::f32, tokens);  // the rows' log-sum-exp the loss saves
      forward.output_kept = true;
      forward.saved = &saved;
      gradient.side = &loss;  // the gradient reads what the loss saved
      gradient.saved = &saved;
      const double bytes = 2 * bf16_bytes * tokens * vocab;  // the logits read, the gradient written
      report("cross_entropy", "loss, then the gradient on the kept statistics", vocab,
             median_ms(
                 gpu,
                 [&] {
                   gpu.run(forward);
                   gpu.run(gradient);
                 },
                 repeat),
             bytes);
      report("cross_entropy", "the loss's call writing the gradient", vocab, median_ms(gpu, together, repeat),
             bytes);
    }

    // ---- the token table's gradient ----------------------------------------------------------------
    {
      const std::int64_t cols = 768;
      buffer ids = ids_buffer(gpu, tokens, 50257, 3);
      buffer dout = random_buffer(gpu, dtype::bf16, tokens * cols, 4);
      buffer table = gpu.allocate(dtype::bf16, vocab * cols);
      const call c =
          make_call(op::embedding_grad, dtype::bf16, table, {&ids, &dout}, {tokens, vocab, cols, 0});
      report("embedding_grad", "tokens sorted by row", cols, median_ms(gpu, c, repeat),
             bf16_bytes * (tokens + vocab) * cols);
    }

    // ---- norms and embeddings at GPT-2 124M's and 350M's widths -----------------------------------
    for (const std::int64_t cols : {768, 1024}) {
      buffer x = random_buffer(gpu, dtype::bf16, tokens * cols, 5),
             dy = random_buffer(gpu, dtype::bf16, tokens * cols, 6);
      buffer addend = random_buffer(gpu, dtype::bf16, tokens * cols, 7);
      buffer w = random_buffer(gpu, dtype::bf16, cols, 8), b = random_buffer(gpu, dtype::bf16, cols, 9);
      buffer dx = gpu.allocate(dtype::bf16, tokens * cols), y = gpu.allocate(dtype::bf16, tokens * cols);
      buffer dw = gpu.allocate(dtype::bf16, cols), db = gpu.allocate(dtype::bf16, cols);
      buffer table = random_buffer(gpu, dtype::bf16, vocab * cols, 10),
             ids = ids_buffer(gpu, tokens, 50257, 11);
      buffer positions = random_buffer(gpu, dtype::bf16, 1024 * cols, 12);
      const double row_bytes = bf16_bytes * tokens * cols;

      // layer_norm_grad_x (x, w, dy) with dw, db and the residual stream's add
      call gradients = make_call(op::layer_norm_grad_x, dtype::bf16, dx, {&x, &w, &dy}, {tokens, cols});
      gradients.scalar = 1e-5;
      gradients.weight_grad = &dw;
      gradients.bias_grad = &db;
      gradients.epilogue = sg::compute::product_epilogue::add;
      gradients.side = &addend;
      report("layer_norm_grad_x", "dx + addend, dw and db in one pass", cols,
             median_ms(gpu, gradients, repeat), 4 * row_bytes);

      call norm = make_call(op::layer_norm, dtype::bf16, y, {&x, &w, &b}, {tokens, cols});
      norm.scalar = 1e-5;
      report("layer_norm", "a warp a row", cols, median_ms(gpu, norm, repeat), 2 * row_bytes);

      const call gather = make_call(op::embedding, dtype::bf16, y, {&ids, &table}, {tokens, vocab, cols, 0});
      report("embedding", "16-byte vectors", cols, median_ms(gpu, gather, repeat), 2 * row_bytes);

      const call position =
          make_call(op::position_embedding, dtype::bf16, y, {&x, &positions}, {tokens / 1024, 1024, cols});
      report("position_embedding", "16-byte vectors", cols, median_ms(gpu, position, repeat), 2 * row_bytes);
    }
    gpu.synchronize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
