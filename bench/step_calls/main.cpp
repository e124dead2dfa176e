// step_calls: the backend calls one GPT-2 training step makes, by operation, on one rank: what a GPU
// backend launches per step (each call is one kernel, one cuBLASLt product or one copy there; the
// cuda backend adds a second launch for column sums and none for the rest). Counted on the cpu
// backend through a wrapper, so it runs anywhere; the figures do not depend on the batch.
//
//   step_calls [--model 124M|350M] [--batch 1] [--seq 64] [--dtype bf16|f32]
//
// Prints one JSON line per operation, then the total:
//   {"bench": "step_calls", "model": "124M", "op": "linear", "calls": 146}
//   {"bench": "step_calls", "model": "124M", "op": "total", "calls": 643, "loss": ..., "gradient_sums_bytes":
//   0}
// The second of two steps is counted (the first creates the optimizer's state).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
template <sg::dtype T>
constexpr sg::graph gpt2_one_rank() {
  return sg::models::gpt2<Mesh>({.type = T, .data_axis = "", .tensor_axis = ""});
}
constexpr sg::program bf16_program = sg::compile<gpt2_one_rank<sg::dtype::bf16>, sg::training{}>();
constexpr sg::program f32_program = sg::compile<gpt2_one_rank<sg::dtype::f32>, sg::training{}>();

// The cpu backend, counting each call by operation (kernel calls by their op's name).
struct counting_backend : sg::cpu::backend {
  std::map<std::string, int>* calls = nullptr;
  void count(const std::string& what) { ++(*calls)[what]; }
  void run(const sg::compute::kernel_call<buffer>& c) {
    count(std::string(sg::op_name(c.kind)) + (c.weight_grad != nullptr ? " with weight_grad" : "") +
          (c.bias_grad != nullptr ? " with bias_grad" : "") +
          (c.key_grad != nullptr ? " with dk and dv" : ""));
    sg::cpu::backend::run(c);
  }
  void copy(const buffer& from, buffer& to) {
    count("copy");
    sg::cpu::backend::copy(from, to);
  }
  void add_scaled(const buffer& from, buffer& to, double factor) {
    count("add_scaled");
    sg::cpu::backend::add_scaled(from, to, factor);
  }
  void scale(buffer& b, double factor) {
    count("scale");
    sg::cpu::backend::scale(b, factor);
  }
  void fill_zero(buffer& b) {
    count("fill_zero");
    sg::cpu::backend::fill_zero(b);
  }
  void convert(const buffer& from, buffer& to) {
    count("convert");
    sg::cpu::backend::convert(from, to);
  }
  void copy_range(const buffer& from, std::int64_t a, buffer& to, std::int64_t b, std::int64_t n) {
    count("copy_range");
    sg::cpu::backend::copy_range(from, a, to, b, n);
  }
  void adamw(buffer& p, const buffer& g, buffer& m, buffer& v, const sg::compute::adamw_arguments& a) {
    count("adamw");
    sg::cpu::backend::adamw(p, g, m, v, a);
  }
  void adamw_many(std::span<const sg::compute::adamw_update<buffer>> updates) {
    count("adamw_many");  // one launch on a GPU (the cpu's per-tensor work inside is not counted)
    sg::cpu::backend::adamw_many(updates);
  }
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "shardgraph: step_calls: %s. usage: step_calls [--model 124M|350M] [--batch B] [--seq T] "
               "[--dtype bf16|f32]\n",
               why.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "124M", type = "bf16";
  std::int64_t batch = 1, seq = 64;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage("option " + a + " needs a value");
    const std::string v = argv[i + 1];
    if (a == "--model")
      model = v;
    else if (a == "--dtype")
      type = v;
    else if (a == "--batch")
      batch = std::stoll(v);
    else if (a == "--seq")
      seq = std::stoll(v);
    else
      usage("unknown option " + a);
  }
  if (model != "124M" && model != "350M") usage("--model " + model + " is not 124M or 350M");
  if (type != "bf16" && type != "f32") usage("--dtype " + type + " is not bf16 or f32");
  if (batch < 1 || seq < 1 || seq > 1024) usage("--batch must be at least 1 and --seq in 1..1024");
  sg::models::gpt2_config config = sg::models::gpt2_config::small();
  if (model == "350M") config = sg::models::gpt2_config::medium();
  const sg::program& program = type == "bf16" ? bf16_program : f32_program;

  std::map<std::string, int> calls;
  sg::threads::world(1).run([&](sg::threads::communicator& comm) {
    counting_backend backend;
    backend.calls = &calls;
    auto rank =
        sg::bind(program, config.sizes(batch, seq), comm, backend, sg::mesh_shape{{"dp", 1}, {"tp", 1}},
                 sg::random_weights(1, 0.02), {}, {.outputs = {"loss"}});
    sg::training_options options;
    options.max_grad_norm = 1.0;
    sg::trainer trainer(rank, options);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(batch * seq));
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<std::int64_t>((i * 2654435761u) % 50257);
    sg::tensor_map inputs;
    inputs.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
    inputs.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
    trainer.step(inputs);
    calls.clear();
    const sg::step_report report = trainer.step(inputs);
    int total = 0;
    for (const auto& [op, n] : calls) {
      std::printf("{\"bench\": \"step_calls\", \"model\": \"%s\", \"op\": \"%s\", \"calls\": %d}\n",
                  model.c_str(), op.c_str(), n);
      total += n;
    }
    std::printf(
        "{\"bench\": \"step_calls\", \"model\": \"%s\", \"op\": \"total\", \"calls\": %d, \"loss\": %.6f, "
        "\"gradient_sums_bytes\": %lld, \"gradients_in_place\": %d, \"bias_gradients_with_weights\": %d}\n",
        model.c_str(), total, report.loss, static_cast<long long>(trainer.memory().gradient_sums),
        rank.memory().gradients_in_place, rank.bias_gradients_with_weights());
  });
}
