// inspect_layout: prints the per-rank program of GPT-2 or LLaMA for a mesh given on the command
// line: every parameter's placement, every step with this rank's local shapes, and each inserted
// collective with the tensor it moves and the op that required it.
//
//   inspect_layout --mesh dp=2,tp=2 --model gpt2 [--config tiny|small] [--batch 8 --seq 1024]
//                  [--rank 3] [--dot program.dot]
//
//   input_ids (batch/dp, seq)
//       |
//   embedding(wte: vocab/tp rows) -- Partial on tp --> all_reduce @tp --> + wpe
//       |
//   repeat h x layers:  ln_1 -> q,k,v (column parallel) -> attention -> c_proj (row parallel)
//                       -> all_reduce @tp -> + x -> ln_2 -> c_fc -> gelu -> c_proj -> all_reduce @tp -> + x
//       |
//   ln_f -> lm_head (vocab/tp columns) -> all_gather @tp -> cross_entropy -> all_reduce @dp -> loss
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>

#include <shardgraph/program/print_graphviz.hpp>
#include <shardgraph/program/print_text.hpp>
#include <shardgraph/runtime/local_layout.hpp>
#include <shardgraph/shardgraph.hpp>

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::graph gpt2_graph() { return sg::models::gpt2<Mesh>(); }
constexpr sg::graph llama_graph() { return sg::models::llama<Mesh>(); }
constexpr sg::program gpt2_program = sg::compile<gpt2_graph>();
constexpr sg::program llama_program = sg::compile<llama_graph>();

int usage(const char* why) {
  std::fprintf(stderr,
               "shardgraph: inspect_layout: %s. usage: inspect_layout --mesh dp=2,tp=2 [--model gpt2|llama] "
               "[--config tiny|small] [--batch B] [--seq T] [--rank R] [--dot FILE]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mesh_text = "dp=2,tp=2", model = "gpt2", config = "small", dot;
  std::int64_t batch = 8, seq = 1024;
  int rank = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("see the comment at the top of %s for every option\n", "examples/inspect_layout/main.cpp");
      return 0;
    }
    if (i + 1 >= argc) return usage(("missing value after " + std::string(a)).c_str());
    std::string v = argv[++i];
    if (a == "--mesh") mesh_text = v;
    else if (a == "--model") model = v;
    else if (a == "--config") config = v;
    else if (a == "--dot") dot = v;
    else if (a == "--batch") batch = std::stoll(v);
    else if (a == "--seq") seq = std::stoll(v);
    else if (a == "--rank") rank = std::stoi(v);
    else return usage(("unknown option " + std::string(a)).c_str());
  }
  if (model != "gpt2" && model != "llama") return usage("--model must be gpt2 or llama");
  if (config != "tiny" && config != "small") return usage("--config must be tiny or small");
  try {
    const sg::program& p = model == "gpt2" ? gpt2_program : llama_program;
    sg::mesh_shape mesh = sg::mesh_shape::parse(mesh_text);
    int world = mesh.world_size(p.nodes.axes);
    if (rank < 0 || rank >= world) return usage(("--rank must be in [0, " + std::to_string(world) + ")").c_str());
    sg::model_sizes sizes;
    if (model == "gpt2") {
      sg::models::gpt2_config c = config == "tiny" ? sg::models::gpt2_config{96, 32, 32, 4, 2} : sg::models::gpt2_config::small();
      sizes = c.sizes(batch, seq);
    } else {
      sg::models::llama_config c = config == "tiny" ? sg::models::llama_config{96, 32, 64, 8, 4, 2} : sg::models::llama_config::tinyllama_1b();
      sizes = c.sizes(batch, seq);
    }
    // The same checks bind() makes, so a layout that cannot run is reported here too.
    sg::local_layout layout(p, sizes, mesh, mesh.coordinates(p.nodes.axes, rank));
    std::cout << model << " (" << config << ") on mesh " << mesh.to_string() << ": " << world << " ranks; rank " << rank
              << " has coordinates";
    auto coords = mesh.coordinates(p.nodes.axes, rank);
    for (int a = 0; a < p.nodes.axes.size(); ++a) std::cout << ' ' << p.nodes.axes.name(a) << '=' << coords[static_cast<std::size_t>(a)];
    std::cout << "; batch " << batch << ", seq " << seq << "\n\n";
    sg::print_program(std::cout, p, {sizes, mesh});
    if (!dot.empty()) {
      std::ofstream f(dot);
      sg::print_graphviz(f, p);
      if (!f) throw sg::error(sg::error_message("inspect_layout --dot " + dot, "cannot write the file", "check the path"));
      std::cout << "wrote " << dot << " (render with: dot -Tsvg " << dot << " -o program.svg)\n";
    }
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
