// Sharded loading (issue 6): a HF-format GPT-2 checkpoint with random weights, written here, loaded
// under tp = 4 on four thread ranks. Each rank reads only the bytes of its own slices (about a quarter
// of the file: the matrices split four ways, the few replicated vectors read whole), and the loaded
// model computes what one rank that read the whole file computes.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/io/hf_weights.hpp>
#include <shardgraph/io/safetensors.hpp>
#include <shardgraph/io/safetensors_checkpoint.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::graph gpt2_graph() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::program gpt2 = sg::compile<gpt2_graph>();

// d = 128, 2 layers, vocab 2048, 64 positions: the matrices hold 99 % of the bytes.
constexpr sg::models::gpt2_config config{
    .vocab = 2048, .positions = 64, .model = 128, .heads = 4, .layers = 2};

// GPT2LMHeadModel's tensors (lm_head tied to wte, so not stored), in F32, values in [-0.1, 0.1).
struct random_tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};
std::vector<random_tensor> random_gpt2() {
  const std::int64_t d = config.model;
  std::vector<random_tensor> tensors{{"transformer.wte.weight", {config.vocab, d}, {}},
                                     {"transformer.wpe.weight", {config.positions, d}, {}},
                                     {"transformer.ln_f.weight", {d}, {}},
                                     {"transformer.ln_f.bias", {d}, {}}};
  for (std::int64_t l = 0; l < config.layers; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    for (const random_tensor& e : std::vector<random_tensor>{{"ln_1.weight", {d}, {}},
                                                             {"ln_1.bias", {d}, {}},
                                                             {"attn.c_attn.weight", {d, 3 * d}, {}},
                                                             {"attn.c_attn.bias", {3 * d}, {}},
                                                             {"attn.c_proj.weight", {d, d}, {}},
                                                             {"attn.c_proj.bias", {d}, {}},
                                                             {"ln_2.weight", {d}, {}},
                                                             {"ln_2.bias", {d}, {}},
                                                             {"mlp.c_fc.weight", {d, 4 * d}, {}},
                                                             {"mlp.c_fc.bias", {4 * d}, {}},
                                                             {"mlp.c_proj.weight", {4 * d, d}, {}},
                                                             {"mlp.c_proj.bias", {d}, {}}})
      tensors.push_back({h + e.name, e.shape, {}});
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-0.1f, 0.1f);
  for (random_tensor& t : tensors) {
    std::int64_t n = 1;
    for (const std::int64_t s : t.shape) n *= s;
    t.values.resize(static_cast<std::size_t>(n));
    for (float& v : t.values) v = uniform(rng);
  }
  return tensors;
}

// Tensors [first, last) of `all` into one file.
void write_part(const std::filesystem::path& path, const std::vector<random_tensor>& all, std::size_t first,
                std::size_t last) {
  std::vector<sg::io::tensor_to_write> tensors;
  for (std::size_t i = first; i < last; ++i)
    tensors.push_back(sg::io::make_tensor_to_write(all[i].name, all[i].shape, all[i].values));
  sg::io::write_safetensors(path.string(), tensors);
}

std::string write_random_gpt2(const std::filesystem::path& path) {
  const std::vector<random_tensor> all = random_gpt2();
  write_part(path, all, 0, all.size());
  return path.string();
}

void write_text(const std::filesystem::path& path, const std::string& text) { std::ofstream(path) << text; }

// The same tensors as two files and model.safetensors.index.json, as save_pretrained shards them.
void write_sharded_gpt2(const std::filesystem::path& dir) {
  const std::vector<random_tensor> all = random_gpt2();
  const std::size_t half = all.size() / 2;
  const std::string names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  write_part(dir / names[0], all, 0, half);
  write_part(dir / names[1], all, half, all.size());
  std::string index = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  for (std::size_t i = 0; i < all.size(); ++i)
    index += (i ? ", \"" : "\"") + all[i].name + "\": \"" + names[i < half ? 0 : 1] + "\"";
  write_text(dir / "model.safetensors.index.json", index + "}}");
}

// Token ids and targets (2, 16).
sg::tensor_map token_inputs() {
  std::vector<std::int64_t> ids(32), targets(32);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>((i * 131 + 7) % 2048);
    targets[i] = static_cast<std::int64_t>((i * 37 + 3) % 2048);
  }
  return {{"input_ids", sg::host_tensor::from<std::int64_t>({2, 16}, ids)},
          {"targets", sg::host_tensor::from<std::int64_t>({2, 16}, targets)}};
}

struct load_result {
  sg::tensor_map out;                         // rank 0's
  std::vector<std::uint64_t> bytes_per_rank;  // tensor bytes each rank's source read
};

load_result load_and_run(const std::shared_ptr<const sg::io::safetensors_checkpoint>& file, int tp,
                         const sg::tensor_map& inputs) {
  load_result r;
  std::vector<std::shared_ptr<std::atomic<std::uint64_t>>> counters;
  for (int i = 0; i < tp; ++i) counters.push_back(std::make_shared<std::atomic<std::uint64_t>>(0));
  sg::threads::world(tp).run([&](sg::threads::communicator& comm) {
    const auto source =
        sg::io::hf_gpt2_weights(file, config.model, counters[static_cast<std::size_t>(comm.rank())]);
    auto rank = sg::bind(gpt2, config.sizes(2, 16), comm, sg::cpu::backend{},
                         sg::mesh_shape{{"dp", 1}, {"tp", tp}}, source);
    auto out = rank.forward(inputs);
    if (comm.rank() == 0) r.out = std::move(out);
  });
  for (const auto& c : counters) r.bytes_per_rank.push_back(c->load());
  return r;
}

}  // namespace

TEST_CASE(
    "under tp = 4 each rank reads about a quarter of a GPT-2 checkpoint, and computes what one rank does",
    "[io][sharded_load][threads]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("shardgraph-sharded-load-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto single =
      std::make_shared<const sg::io::safetensors_file>(write_random_gpt2(dir / "model.safetensors"));
  const auto file = sg::io::safetensors_checkpoint::of(single);
  std::uint64_t data_bytes = 0;
  for (const sg::io::tensor_info& t : single->tensors()) data_bytes += t.end - t.begin;

  const sg::tensor_map inputs = token_inputs();
  const load_result one = load_and_run(file, 1, inputs);
  const load_result four = load_and_run(file, 4, inputs);
  CHECK(one.bytes_per_rank.at(0) == data_bytes);  // one rank reads every tensor byte once
  for (const std::uint64_t bytes : four.bytes_per_rank) {
    const double share = static_cast<double>(bytes) / static_cast<double>(data_bytes);
    CAPTURE(bytes, data_bytes, share);
    CHECK(share >= 0.25);
    CHECK(share <= 0.27);  // the replicated position table, norms and biases: under 2 % of the file
  }
  const sg::host_tensor& a = one.out.at("loss");
  const sg::host_tensor& b = four.out.at("loss");
  CHECK(std::abs(a.at(0) - b.at(0)) <= 1e-10 * std::abs(a.at(0)));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a checkpoint in several files with its index loads as the single file does",
          "[io][sharded_load][threads]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("shardgraph-index-load-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "single");
  std::filesystem::create_directories(dir / "sharded");
  write_random_gpt2(dir / "single" / "model.safetensors");
  write_sharded_gpt2(dir / "sharded");
  const auto single = sg::io::safetensors_checkpoint::open((dir / "single").string());
  const auto sharded = sg::io::safetensors_checkpoint::open((dir / "sharded").string());
  CHECK(single->file_count() == 1);
  CHECK(sharded->file_count() == 2);
  CHECK(sharded->tensor_names() == single->tensor_names());
  const sg::tensor_map inputs = token_inputs();
  const load_result a = load_and_run(single, 2, inputs);
  const load_result b = load_and_run(sharded, 2, inputs);
  CHECK(a.out.at("loss").at(0) == b.out.at("loss").at(0));  // the same bytes, read from two files
  CHECK(a.bytes_per_rank == b.bytes_per_rank);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a checkpoint index that is wrong is refused, naming the index, the file and the tensor",
          "[io][sharded_load]") {
  using shardgraph::testing::contains;
  using shardgraph::testing::error_of;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("shardgraph-bad-index-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string index = (dir / "model.safetensors.index.json").string();
  const auto open = [&] { return error_of([&] { sg::io::safetensors_checkpoint::open(dir.string()); }); };

  CHECK(contains(open(), "holds neither model.safetensors nor model.safetensors.index.json"));
  write_text(index, "{\"metadata\": {}}");
  CHECK(contains(open(), index + ": \"weight_map\" is missing"));
  write_text(index, "{\"weight_map\": []}");
  CHECK(contains(open(), "\"weight_map\" is an array, not an object"));
  write_text(index, "{\"weight_map\": {\"w\": \"model-00001-of-00002.safetensors\"}}");
  const std::string missing = open();
  CHECK(contains(missing, "it names model-00001-of-00002.safetensors (for tensor 'w'), which is not in"));
  write_text(index, "{\"weight_map\": {\"w\": \"../elsewhere.safetensors\"}}");
  CHECK(contains(open(), "is not a plain file name in the checkpoint's directory"));

  // The index places "b" in a file that holds only "w".
  const std::vector<float> w{1, 2};
  sg::io::write_safetensors((dir / "part.safetensors").string(), {sg::io::make_tensor_to_write("w", {2}, w)});
  write_text(index, "{\"weight_map\": {\"w\": \"part.safetensors\", \"b\": \"part.safetensors\"}}");
  const auto checkpoint = sg::io::safetensors_checkpoint::open(dir.string());
  CHECK(checkpoint->file_of("w").read_as<float>("w") == w);
  const std::string wrong_file = error_of([&] { checkpoint->file_of("b"); });
  CHECK(contains(wrong_file, "part.safetensors: tensor 'b'"));
  CHECK(contains(wrong_file, "places it in this file, which does not hold it"));
  CHECK(contains(error_of([&] { checkpoint->file_of("c"); }), "no tensor 'c' among the 2 of the checkpoint"));
  std::filesystem::remove_all(dir);
}
