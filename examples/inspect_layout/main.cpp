// inspect_layout: prints the per-rank program of GPT-2 or LLaMA for a mesh given on the command
// line: every parameter's placement, every step with this rank's local shapes, and each inserted
// collective with the tensor it moves and the op that required it.
//
//   inspect_layout --mesh dp=2,tp=2 --model gpt2 [--config tiny|small] [--batch 8 --seq 1024]
//                  [--rank 3] [--dot program.dot]
//                  [--pp 4 [--schedule gpipe|1f1b|interleaved-1f1b] [--micro-batches 8]
//                   [--virtual-stages 2] [--stage-layers 3,3,4,2] [--svg schedule.svg]]
//   inspect_layout --bound --mesh dp=2,tp=2 --config tiny --batch 4 --seq 16 [--rank 3|all] [--zero 0|1|2|3]
//   inspect_layout --kv-memory 1GiB --mesh dp=2,tp=2 --model llama [--batch 8 --seq 1] [--block-tokens 16]
//
// With --kv-memory it prints the generation program instead (inference{.kv_cache = true}: prefill
// and decode steps over a paged KV cache), sized for the cache a rank holds in that budget: the
// blocks and tokens per rank, and the bytes of a block (generation_programs.md).
//
// With --bound it binds the model's training program instead (zero weights, the cpu backend, one
// thread rank per mesh rank, ZeRO stage --zero, default 0) and prints the bound plan of rank --rank
// (default 0; `all`: every rank, in order): per call of one step its op, local shapes, the buffers
// it writes and reads with their arena offsets, each collective's axis and bytes; then the memory
// bind allocated (the arena among it), the gradient buckets and ZeRO-3's gathers
// (plan/print_bound_plan.hpp). Binding allocates what training would: choose small sizes.
//
// With --pp N (N >= 2) it then shows the pipeline view of the same model: how its block layers split
// over N ranks (--stage-layers, one count per virtual stage, or balanced), the schedule's timeline per
// rank with its bubble (micro-batches: 2 N unless given; virtual stages: 1, or 2 for interleaved-1f1b),
// the micro-batches each rank keeps in flight, and with --svg the timeline as a drawing. The schedule
// is checked to be deadlock-free first (pipeline::verify). The program printed above is not split into
// stages: --pp is a view of the schedule only, not an axis of the compiled mesh.
//
//   input_ids (batch/dp, seq)
//       |
//   embedding(wte: vocab/tp rows) -- Partial on tp --> all_reduce @tp --> + wpe
//       |
//   repeat h x layers:  ln_1 -> q,k,v (column parallel) -> attention -> c_proj (row parallel)
//                       -> all_reduce @tp -> + x -> ln_2 -> c_fc -> gelu -> c_proj -> all_reduce @tp -> + x
//       |
//   ln_f -> lm_head (vocab/tp columns) -> all_gather @tp -> cross_entropy -> all_reduce @dp -> loss
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::graph gpt2_graph() { return sg::models::gpt2<Mesh>(); }
constexpr sg::graph llama_graph() { return sg::models::llama<Mesh>(); }
constexpr sg::program gpt2_program = sg::compile<gpt2_graph>();
constexpr sg::program llama_program = sg::compile<llama_graph>();
// The training programs --bound binds: ZeRO stages 0 and 1 compile to one graph, 2 and 3 to another
// (passes/compile.hpp); the stage is the program's field, set by training_program().
constexpr sg::program gpt2_training = sg::compile<gpt2_graph, sg::training{.zero_stage = 1}>();
constexpr sg::program gpt2_sharded_gradients = sg::compile<gpt2_graph, sg::training{.zero_stage = 2}>();
constexpr sg::program llama_training = sg::compile<llama_graph, sg::training{.zero_stage = 1}>();
constexpr sg::program llama_sharded_gradients = sg::compile<llama_graph, sg::training{.zero_stage = 2}>();

int usage(const char* why) {
  std::fprintf(stderr,
               "shardgraph: inspect_layout: %s. usage: inspect_layout --mesh dp=2,tp=2 [--model gpt2|llama] "
               "[--config tiny|small] [--batch B] [--seq T] [--rank R] [--dot FILE] [--pp N] "
               "[--schedule gpipe|1f1b|interleaved-1f1b] [--micro-batches M] [--virtual-stages V] "
               "[--stage-layers 3,3,4,2] [--svg FILE] | --bound [--rank R|all] [--zero 0|1|2|3] | --kv-memory 1GiB "
               "[--block-tokens 16]\n",
               why);
  return 2;
}

// The pipeline options as given on the command line; parsed once the model is known.
struct pipeline_request {
  std::string pp = "1", schedule, micro_batches, virtual_stages, stage_layers, svg;
  // The first pipeline option given, for the message when --pp is 1.
  std::string first_given() const {
    if (!schedule.empty()) return "--schedule";
    if (!micro_batches.empty()) return "--micro-batches";
    if (!virtual_stages.empty()) return "--virtual-stages";
    if (!stage_layers.empty()) return "--stage-layers";
    return svg.empty() ? "" : "--svg";
  }
};

// A whole number of at least `minimum` for `option`, else a shardgraph::error that says so.
int whole_number(const std::string& option, const std::string& text, int minimum) {
  int n = 0;
  bool digits = !text.empty() && text.size() <= 9;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (digits) n = std::stoi(text);
  if (!digits || n < minimum)
    sg::fail("inspect_layout " + option + " '" + text + "'",
             "not a whole number of at least " + std::to_string(minimum),
             "write e.g. " + option + " " + std::to_string(minimum == 1 ? 4 : minimum));
  return n;
}

// "3,3,4,2" -> {3, 3, 4, 2}; partition_layers checks the counts themselves.
std::vector<std::int64_t> layer_counts(const std::string& text) {
  std::vector<std::int64_t> counts;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    bool number = !item.empty() && item.size() <= 12;
    for (std::size_t k = 0; k < item.size(); ++k)
      number =
          number && ((item[k] >= '0' && item[k] <= '9') || (k == 0 && item[k] == '-' && item.size() > 1));
    if (!number)
      sg::fail("inspect_layout --stage-layers '" + text + "'", "'" + item + "' is not a whole number",
               "give one layer count per (virtual) stage, separated by commas, e.g. --stage-layers 3,3,3,3");
    counts.push_back(std::stoll(item));
    at = comma + 1;
  }
  return counts;
}

// The pipeline view of a model with `layers` block layers: the text to print, and the SVG when asked.
struct pipeline_view {
  std::string text, svg;
};

pipeline_view view_pipeline(const pipeline_request& request, std::int64_t layers, const std::string& model) {
  const int pp = whole_number("--pp", request.pp, 1);
  if (pp == 1) {
    if (!request.first_given().empty())
      sg::fail("inspect_layout " + request.first_given(),
               "the pipeline options need a pipeline of 2 or more ranks",
               "add --pp N with N >= 2, or drop the pipeline options");
    return {};
  }
  const sg::pipeline::schedule_kind kind =
      sg::pipeline::parse_schedule(request.schedule.empty() ? "1f1b" : request.schedule);
  const bool interleaved = kind == sg::pipeline::schedule_kind::interleaved_1f1b;
  const int micro_batches =
      request.micro_batches.empty() ? 2 * pp : whole_number("--micro-batches", request.micro_batches, 1);
  const int virtual_stages = request.virtual_stages.empty()
                                 ? (interleaved ? 2 : 1)
                                 : whole_number("--virtual-stages", request.virtual_stages, 1);
  const sg::pipeline::schedule schedule =
      sg::pipeline::make_schedule(kind, pp, micro_batches, virtual_stages);
  const std::vector<std::int64_t> counts =
      request.stage_layers.empty() ? std::vector<std::int64_t>{} : layer_counts(request.stage_layers);
  const sg::pipeline::stage_partition partition =
      sg::pipeline::partition_layers(layers, schedule.stages(), counts);
  sg::pipeline::verify(schedule);
  const sg::pipeline::timeline timeline = sg::pipeline::simulate(schedule);

  pipeline_view view;
  std::string& t = view.text;
  t += "\npipeline view: " + std::string(sg::pipeline::schedule_name(kind)) +
       " over pp=" + std::to_string(pp) + ", " + std::to_string(micro_batches) + " micro-batches" +
       (interleaved ? ", " + std::to_string(virtual_stages) + " model chunks per rank" : "") +
       " (the program above is not split into stages)\n\n";
  t += model + " has " + std::to_string(layers) + " block layers; " +
       (counts.empty() ? "balanced split, the embedding and the head each counted as one layer:\n"
                       : "split as --stage-layers " + request.stage_layers + ":\n");
  t += partition.report();
  if (interleaved) {
    t += "virtual stage j runs on rank j % " + std::to_string(pp) + ":";
    for (int r = 0; r < pp; ++r) {
      t += std::string(r ? ";" : "") + " rank " + std::to_string(r) + " holds";
      for (int c = 0; c < virtual_stages; ++c)
        t += (c ? ", " : " ") + std::to_string(schedule.virtual_stage(r, c));
    }
    t += "\n";
  }
  t += "\nverified: no deadlock with synchronous send/recv; every micro-batch runs forward and backward once "
       "per stage\n\n";
  t += sg::pipeline::timeline_text(schedule, timeline);
  t += "max micro-batches in flight (activations kept):";
  for (int r = 0; r < pp; ++r)
    t += std::string(r ? "," : "") + " rank " + std::to_string(r) + ": " +
         std::to_string(sg::pipeline::max_in_flight(schedule, r));
  t += "\n";
  if (!request.svg.empty()) view.svg = sg::pipeline::timeline_svg(schedule, timeline);
  return view;
}

// The training program of `model` for ZeRO stage `zero` (0 to 3).
sg::program training_program(const std::string& model, int zero) {
  const bool gpt2 = model == "gpt2";
  sg::program p = zero >= 2 ? (gpt2 ? gpt2_sharded_gradients : llama_sharded_gradients)
                            : (gpt2 ? gpt2_training : llama_training);
  p.zero_stage = zero;
  if (zero == 0) p.zero_axis = -1;
  return p;
}

// Binds `p` on one thread rank per mesh rank (the cpu backend, zero weights) and prints the bound
// plan of rank `only` (-1: every rank, in order).
void print_bound_plans(const sg::program& p, const sg::model_sizes& sizes, const sg::mesh_shape& mesh, int only) {
  const int world = mesh.world_size(p.nodes.axes);
  std::vector<std::string> printed(static_cast<std::size_t>(world));
  const sg::weight_source zeros = [](std::string_view, const sg::tensor_slice&, sg::host_tensor&) {};
  sg::threads::world(world).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, mesh, zeros);
    if (only >= 0 && comm.rank() != only) return;
    std::ostringstream out;
    print(rank.plan(), out);
    printed[static_cast<std::size_t>(comm.rank())] = out.str();  // one element per rank: no race
  });
  for (const std::string& text : printed)
    if (!text.empty()) std::cout << '\n' << text;
}

// The generation program of `model` (compiled at run time) with the cache sizes of `budget` bytes
// per rank: blocks of `block_tokens` tokens, as many as a rank holds, each data-parallel rank its own.
sg::program generation_program(const std::string& model, sg::model_sizes& sizes, const sg::mesh_shape& mesh,
                               const std::string& budget, std::int64_t block_tokens) {
  const sg::program p = sg::compile_graph(model == "gpt2" ? gpt2_graph() : llama_graph(), sg::inference{.kv_cache = true});
  const sg::memory_amount amount = sg::parse_memory_amount(budget, "inspect_layout --kv-memory", "nothing else: bytes per rank");
  if (amount.bytes <= 0)
    sg::fail("inspect_layout --kv-memory " + budget, "is a share, and inspect_layout measures no device",
             "give bytes per rank: 1GiB, 512MiB");
  const std::int64_t bytes = amount.bytes;
  sg::set_kv_cache_sizes(sizes, {.blocks = 1, .block_tokens = block_tokens, .max_blocks = 1});
  const std::int64_t per_block = sg::kv_cache_bytes_per_block(p, sizes, mesh);
  const std::int64_t blocks = bytes / per_block;
  if (blocks < 1)
    sg::fail("inspect_layout --kv-memory " + budget,
             "holds no cache block of " + std::to_string(per_block) + " bytes per rank",
             "give at least " + std::to_string(per_block) + " bytes");
  const std::int64_t max_blocks = (sizes.get(sg::size_symbol::seq) + block_tokens - 1) / block_tokens;
  sg::set_kv_cache_sizes(sizes, {.blocks = blocks * mesh.size("dp"), .block_tokens = block_tokens, .max_blocks = max_blocks});
  std::cout << "kv cache: " << blocks << " blocks of " << block_tokens << " tokens (" << blocks * block_tokens
            << " tokens) per rank in " << blocks * per_block << " bytes of the " << bytes << " given, " << per_block
            << " bytes per block\n";
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mesh_text = "dp=2,tp=2", model = "gpt2", config = "small", dot;
  std::int64_t batch = 8, seq = 1024;
  std::string rank_text = "0", zero_text = "0", kv_memory;
  std::int64_t block_tokens = 16;
  bool bound = false;
  pipeline_request pipe;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("see the comment at the top of %s for every option\n", "examples/inspect_layout/main.cpp");
      return 0;
    }
    if (a == "--bound") {
      bound = true;
      continue;
    }
    if (i + 1 >= argc) return usage(("missing value after " + std::string(a)).c_str());
    std::string v = argv[++i];
    if (a == "--mesh") mesh_text = v;
    else if (a == "--model") model = v;
    else if (a == "--config") config = v;
    else if (a == "--dot") dot = v;
    else if (a == "--batch") batch = std::stoll(v);
    else if (a == "--seq") seq = std::stoll(v);
    else if (a == "--rank") rank_text = v;
    else if (a == "--zero") zero_text = v;
    else if (a == "--pp") pipe.pp = v;
    else if (a == "--schedule") pipe.schedule = v;
    else if (a == "--micro-batches") pipe.micro_batches = v;
    else if (a == "--virtual-stages") pipe.virtual_stages = v;
    else if (a == "--stage-layers") pipe.stage_layers = v;
    else if (a == "--svg") pipe.svg = v;
    else if (a == "--kv-memory") kv_memory = v;
    else if (a == "--block-tokens") block_tokens = std::stoll(v);
    else return usage(("unknown option " + std::string(a)).c_str());
  }
  if (model != "gpt2" && model != "llama") return usage("--model must be gpt2 or llama");
  if (config != "tiny" && config != "small") return usage("--config must be tiny or small");
  try {
    sg::program p = model == "gpt2" ? gpt2_program : llama_program;
    sg::mesh_shape mesh = sg::mesh_shape::parse(mesh_text);
    int world = mesh.world_size(p.nodes.axes);
    const bool all_ranks = bound && rank_text == "all";
    const int rank = all_ranks ? 0 : whole_number("--rank", rank_text, 0);
    if (rank >= world) return usage(("--rank must be in [0, " + std::to_string(world) + ")").c_str());
    const int zero = whole_number("--zero", zero_text, 0);
    if (zero > 3 || (zero > 0 && !bound)) return usage("--zero is 0, 1, 2 or 3, and goes with --bound");
    if (bound && (pipe.pp != "1" || !dot.empty()))
      return usage("--bound binds the dp x tp mesh: it takes no --pp or --dot");
    sg::model_sizes sizes;
    std::int64_t layers = 0;
    if (model == "gpt2") {
      sg::models::gpt2_config c = config == "tiny" ? sg::models::gpt2_config{96, 32, 32, 4, 2} : sg::models::gpt2_config::small();
      sizes = c.sizes(batch, seq);
      layers = c.layers;
    } else {
      sg::models::llama_config c = config == "tiny" ? sg::models::llama_config{96, 32, 64, 8, 4, 2} : sg::models::llama_config::tinyllama_1b();
      sizes = c.sizes(batch, seq);
      layers = c.layers;
    }
    // The pipeline view is checked before anything prints, and printed after the program.
    const pipeline_view pipeline = view_pipeline(pipe, layers, model + " (" + config + ")");
    if (!kv_memory.empty()) {
      if (bound || pipe.pp != "1") return usage("--kv-memory prints the generation program: it takes no --bound or --pp");
      p = generation_program(model, sizes, mesh, kv_memory, block_tokens);
    }
    if (bound) {
      std::cout << model << " (" << config << ") training on mesh " << mesh.to_string() << ": " << world
                << " ranks, each bound on a thread with the cpu backend\n";
      print_bound_plans(training_program(model, zero), sizes, mesh, all_ranks ? -1 : rank);
      return 0;
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
    std::cout << pipeline.text;
    if (!pipe.svg.empty()) {
      std::ofstream f(pipe.svg);
      f << pipeline.svg;
      if (!f)
        throw sg::error(
            sg::error_message("inspect_layout --svg " + pipe.svg, "cannot write the file", "check the path"));
      std::cout << "wrote " << pipe.svg << " (open it in a browser)\n";
    }
  } catch (const sg::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
