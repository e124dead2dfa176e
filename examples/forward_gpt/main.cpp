// forward_gpt: a GPT forward pass over several thread ranks, checked against one rank.
//
//   forward_gpt [--mesh dp=2,tp=2] [--model gpt2|llama] [--dtype f64|f32] [--batch 4] [--seq 64]
//
// Prints the per-rank program of rank 0, runs the model with the same random weights on
// dp*tp thread ranks and on one unsharded rank, and checks that logits and loss agree
// (f64: relative 1e-10, f32: 1e-4). Exits non-zero when they do not.
//
//   ids (batch, seq) --dp--> [rank (dp=i, tp=j): embedding -> repeat blocks -> head] --> logits, loss
//                               tensor-parallel all_reduces inside each block
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
template <class Model, sg::dtype T, bool Sharded>
constexpr sg::graph build() {
  constexpr std::string_view dp = Sharded ? "dp" : "", tp = Sharded ? "tp" : "";
  if constexpr (std::is_same_v<Model, sg::models::gpt2_config>)
    return sg::models::gpt2<Mesh>({.type = T, .data_axis = dp, .tensor_axis = tp});
  else
    return sg::models::llama<Mesh>({.type = T, .data_axis = dp, .tensor_axis = tp});
}

struct run_result {
  sg::tensor_map outputs;
  double seconds = 0;
};

run_result run(const sg::program& p, const sg::model_sizes& sizes, const sg::mesh_shape& mesh, const sg::tensor_map& inputs) {
  run_result r;
  int ranks = mesh.world_size(p.nodes.axes);
  sg::threads::world(ranks).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, mesh, sg::random_weights(1, 0.2));
    auto start = std::chrono::steady_clock::now();
    sg::tensor_map out = rank.forward(inputs);
    if (comm.rank() == 0) {
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      r.outputs = std::move(out);
    }
  });
  return r;
}

double relative_difference(const sg::host_tensor& a, const sg::host_tensor& b) {
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::abs(a.at(i) - b.at(i)));
    scale = std::max(scale, std::abs(b.at(i)));
  }
  return diff / scale;
}

template <class Config, sg::dtype T>
int check(const Config& config, const sg::mesh_shape& mesh, std::int64_t batch, std::int64_t seq, double tolerance) {
  static constexpr sg::program sharded = sg::compile<build<Config, T, true>>();
  static constexpr sg::program single = sg::compile<build<Config, T, false>>();
  sg::model_sizes sizes = config.sizes(batch, seq);
  std::cout << "per-rank program (rank 0 of " << mesh.world_size(sharded.nodes.axes) << ", mesh " << mesh.to_string() << ")\n";
  sg::print_program(std::cout, sharded, {sizes, mesh});

  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch * seq)), targets(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>((i * 7919 + 13) % static_cast<std::size_t>(sizes.get(sg::size_symbol::vocab) - 1));
    targets[i] = static_cast<std::int64_t>((i * 104729 + 5) % static_cast<std::size_t>(sizes.get(sg::size_symbol::vocab) - 1));
  }
  sg::tensor_map inputs;
  inputs.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  inputs.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, targets));

  run_result layout = run(sharded, sizes, mesh, inputs);
  run_result one = run(single, sizes, sg::mesh_shape{}, inputs);
  double logits = relative_difference(layout.outputs.at("logits"), one.outputs.at("logits"));
  double loss = relative_difference(layout.outputs.at("loss"), one.outputs.at("loss"));
  std::printf("\nloss: %.12f on %s, %.12f on one rank\n", layout.outputs.at("loss").at(0), mesh.to_string().c_str(),
              one.outputs.at("loss").at(0));
  std::printf("forward time: %.3f s on %s, %.3f s on one rank\n", layout.seconds, mesh.to_string().c_str(), one.seconds);
  std::printf("max relative difference: logits %.3g, loss %.3g (tolerance %.0e)\n", logits, loss, tolerance);
  bool ok = logits < tolerance && loss < tolerance;
  std::printf("%s: the %s layout %s one rank\n", ok ? "OK" : "FAILED", mesh.to_string().c_str(), ok ? "matches" : "does NOT match");
  return ok ? 0 : 1;
}

int usage(const std::string& why) {
  std::fprintf(stderr, "shardgraph: forward_gpt: %s. usage: forward_gpt [--mesh dp=2,tp=2] [--model gpt2|llama] "
                       "[--dtype f64|f32] [--batch B] [--seq T]\n", why.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mesh_text = "dp=2,tp=2", model = "gpt2", type = "f64";
  std::int64_t batch = 4, seq = 64;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("see the comment at the top of %s for every option\n", "examples/forward_gpt/main.cpp");
      return 0;
    }
    if (i + 1 >= argc) return usage("missing value after " + std::string(a));
    std::string v = argv[++i];
    if (a == "--mesh") mesh_text = v;
    else if (a == "--model") model = v;
    else if (a == "--dtype") type = v;
    else if (a == "--batch") batch = std::stoll(v);
    else if (a == "--seq") seq = std::stoll(v);
    else return usage("unknown option " + std::string(a));
  }
  if (model != "gpt2" && model != "llama") return usage("--model must be gpt2 or llama");
  if (type != "f64" && type != "f32") return usage("--dtype must be f64 or f32");
  try {
    sg::mesh_shape mesh = sg::mesh_shape::parse(mesh_text);
    // small enough for a laptop, shaped like the real thing: 4 layers, 8 heads (4 key/value heads for LLaMA)
    sg::models::gpt2_config gpt2{.vocab = 512, .positions = 256, .model = 128, .heads = 8, .layers = 4};
    sg::models::llama_config llama{.vocab = 512, .model = 128, .ffn = 352, .heads = 8, .kv_heads = 4, .layers = 4};
    if (model == "gpt2")
      return type == "f64" ? check<sg::models::gpt2_config, sg::dtype::f64>(gpt2, mesh, batch, seq, 1e-10)
                           : check<sg::models::gpt2_config, sg::dtype::f32>(gpt2, mesh, batch, seq, 1e-4);
    return type == "f64" ? check<sg::models::llama_config, sg::dtype::f64>(llama, mesh, batch, seq, 1e-10)
                         : check<sg::models::llama_config, sg::dtype::f32>(llama, mesh, batch, seq, 1e-4);
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
