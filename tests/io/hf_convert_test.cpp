// HF checkpoints <-> shardgraph checkpoints (issue 6): random-weight HF checkpoints of any size,
// loaded across ranks and saved as a sharded checkpoint, come back through export_hf bit for bit;
// the HF name variants (GPT2Model's unprefixed names, LLaMA with tied embeddings) load.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/io/hf_export.hpp>
#include <shardgraph/io/hf_model.hpp>
#include <shardgraph/io/safetensors_checkpoint.hpp>
#include <shardgraph/io/sharded_weights.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "random_hf_checkpoint.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;
using shardgraph::testing::contains;
using shardgraph::testing::error_of;

namespace {

std::filesystem::path scratch(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("shardgraph-hf-convert-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  return dir;
}

sg::examples::random_hf_model small(const std::string& family, sg::io::st_dtype dtype) {
  sg::examples::random_hf_model m;
  m.family = family, m.vocab = 101, m.model = 32, m.layers = 3, m.heads = 4, m.kv_heads = 2, m.ffn = 48;
  m.positions = 16, m.dtype = dtype, m.max_file_bytes = 20'000, m.threads = 2;
  if (family == "gpt2") m.kv_heads = 4, m.ffn = 4 * m.model;
  return m;
}

// Loads `hf` on the ranks of `mesh` (each reading its slices) and saves a sharded checkpoint.
void import_under(const std::string& hf, const std::string& out, const sg::mesh_shape& mesh,
                  sg::dtype type = sg::dtype::f32) {
  const sg::io::hf_model m = sg::io::open_hf_model(hf, {.type = type, .vocab_multiple = mesh.size("tp")});
  sg::threads::world(mesh.world_size(m.layout.nodes.axes)).run([&](sg::threads::communicator& comm) {
    auto rank =
        sg::bind(m.layout, m.sizes(mesh.size("dp"), 2), comm, sg::cpu::backend{}, mesh, m.weights(nullptr));
    sg::io::save_weights(out, rank.parameters(), comm);
  });
}

// name -> (dtype, shape, bytes) of every tensor of a HF directory
std::map<std::string, std::tuple<sg::io::st_dtype, std::vector<std::int64_t>, std::vector<std::byte>>>
tensors_of(const std::string& directory) {
  auto c = sg::io::safetensors_checkpoint::open(directory);
  std::map<std::string, std::tuple<sg::io::st_dtype, std::vector<std::int64_t>, std::vector<std::byte>>> all;
  for (const std::string& name : c->tensor_names()) {
    const auto& file = c->file_of(name);
    const auto bytes = file.bytes(name);
    all[name] = {file.info(name).dtype, file.info(name).shape, {bytes.begin(), bytes.end()}};
  }
  return all;
}

}  // namespace

TEST_CASE("random HF checkpoints are written as save_pretrained writes them", "[io][convert]") {
  const auto dir = scratch("random-llama");
  sg::examples::random_hf_model m = small("llama", sg::io::st_dtype::bf16);
  const std::uint64_t bytes = sg::examples::write_random_hf_checkpoint(dir.string(), m);
  auto c = sg::io::safetensors_checkpoint::open(dir.string());
  CHECK(c->file_count() > 3);  // split by max_file_bytes, named by the index
  CHECK(std::filesystem::is_regular_file(dir / "model.safetensors.index.json"));
  CHECK(c->tensor_names().size() == 2 + 9 * 3 + 1);
  const auto& q =
      c->file_of("model.layers.2.self_attn.k_proj.weight").info("model.layers.2.self_attn.k_proj.weight");
  CHECK(q.dtype == sg::io::st_dtype::bf16);
  CHECK(q.shape == std::vector<std::int64_t>{2 * 8, 32});  // kv_heads * head_dim, model
  std::uint64_t sum = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") {
      CHECK(e.file_size() < m.max_file_bytes + 4096);  // within the limit, plus its header
      sum += e.file_size();
    }
  CHECK(sum > bytes);

  // the values depend on the seed and the names only: one thread writes the same bytes
  const auto again = scratch("random-llama-one-thread");
  m.threads = 1;
  sg::examples::write_random_hf_checkpoint(again.string(), m);
  CHECK(tensors_of(dir.string()) == tensors_of(again.string()));
  m.seed = 2;
  const auto other = scratch("random-llama-seed-2");
  sg::examples::write_random_hf_checkpoint(other.string(), m);
  CHECK(tensors_of(dir.string()) != tensors_of(other.string()));

  const sg::io::hf_model model = sg::io::open_hf_model(dir.string());
  CHECK(model.family == "llama");
  CHECK(model.vocab == 101);
}

TEST_CASE("HF -> sharded checkpoint under a layout -> HF gives back every tensor bit for bit",
          "[io][convert][threads]") {
  for (const std::string family : {"gpt2", "llama"})
    for (const sg::io::st_dtype dtype : {sg::io::st_dtype::f32, sg::io::st_dtype::bf16})
      for (const char* mesh : {"tp=2,pp=3", "dp=2,tp=2"}) {
        CAPTURE(family, std::string(sg::io::st_dtype_name(dtype)), mesh);
        const auto hf = scratch(family + "-hf"), saved = scratch(family + "-saved"),
                   back = scratch(family + "-back");
        sg::examples::write_random_hf_checkpoint(hf.string(), small(family, dtype));
        import_under(hf.string(), saved.string(), sg::mesh_shape::parse(mesh));
        // f32 was saved: exported in the original dtype, the values (bf16 widened exactly) round back
        sg::io::export_hf(
            saved.string(), back.string(),
            {.config = (hf / "config.json").string(), .dtype = dtype, .max_file_bytes = 30'000});
        CHECK(tensors_of(hf.string()) == tensors_of(back.string()));
        CHECK(std::filesystem::is_regular_file(back / "config.json"));
      }
}

TEST_CASE("the golden config-option cases (untied GPT-2 head, LLaMA biases, tied head, head_dim) round trip",
          "[io][convert][threads]") {
  for (const std::string name : {"gpt2_untied", "gpt2_unscaled", "llama_tied_bias_headdim"})
    for (const char* mesh : {"tp=2,pp=2", "dp=2,tp=2"}) {
      CAPTURE(name, mesh);
      const std::string hf = std::string(SHARDGRAPH_GOLDEN_DIR) + "/" + name;
      const auto saved = scratch(name + "-saved"), back = scratch(name + "-back");
      import_under(hf, saved.string(), sg::mesh_shape::parse(mesh), sg::dtype::f64);
      sg::io::export_hf(saved.string(), back.string(),
                        {.config = hf + "/config.json", .dtype = sg::io::st_dtype::f64});
      const auto original = tensors_of(hf), round_trip = tensors_of(back.string());
      CHECK(original.count("lm_head.weight") == (name == "gpt2_untied" ? 1u : 0u));
      CHECK(original == round_trip);
    }
}

TEST_CASE("GPT-2 without the transformer. prefix and LLaMA with tied embeddings load",
          "[io][convert][threads]") {
  // The hub's gpt2 holds GPT2Model's names ("h.0.attn.c_attn.weight"); strip the prefix of a random one.
  const auto prefixed = scratch("gpt2-prefixed"), bare = scratch("gpt2-bare");
  sg::examples::random_hf_model g = small("gpt2", sg::io::st_dtype::f32);
  g.max_file_bytes = 0;
  sg::examples::write_random_hf_checkpoint(prefixed.string(), g);
  {
    const auto file = sg::io::safetensors_file((prefixed / "model.safetensors").string());
    std::vector<sg::io::tensor_to_write> renamed;
    for (const sg::io::tensor_info& t : file.tensors())
      renamed.push_back(
          {t.name.substr(std::string("transformer.").size()), t.dtype, t.shape, file.bytes(t.name)});
    std::filesystem::create_directories(bare);
    sg::io::write_safetensors((bare / "model.safetensors").string(), renamed);
    std::filesystem::copy_file(prefixed / "config.json", bare / "config.json");
  }
  // LLaMA without lm_head.weight and with tie_word_embeddings: the head is the embedding
  const auto untied = scratch("llama-untied"), tied = scratch("llama-tied");
  sg::examples::random_hf_model l = small("llama", sg::io::st_dtype::f32);
  l.max_file_bytes = 0;
  sg::examples::write_random_hf_checkpoint(untied.string(), l);
  {
    const auto file = sg::io::safetensors_file((untied / "model.safetensors").string());
    std::vector<sg::io::tensor_to_write> kept;
    for (const sg::io::tensor_info& t : file.tensors())
      if (t.name != "lm_head.weight") kept.push_back({t.name, t.dtype, t.shape, file.bytes(t.name)});
    std::filesystem::create_directories(tied);
    sg::io::write_safetensors((tied / "model.safetensors").string(), kept);
    std::ifstream in(untied / "config.json");
    std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string untied_flag = "\"tie_word_embeddings\": false";
    REQUIRE(config.find(untied_flag) != std::string::npos);
    config.replace(config.find(untied_flag), untied_flag.size(), "\"tie_word_embeddings\": true");
    std::ofstream(tied / "config.json") << config;
  }
  const auto parameters = [](const std::filesystem::path& dir) {
    const sg::io::hf_model m = sg::io::open_hf_model(dir.string());
    std::map<std::string, std::vector<double>> values;
    sg::threads::world(1).run([&](sg::threads::communicator& comm) {
      auto rank =
          sg::bind(m.single, m.sizes(1, 2), comm, sg::cpu::backend{}, sg::mesh_shape{}, m.weights(nullptr));
      for (const auto& [name, part] : rank.parameters())
        for (std::int64_t i = 0; i < part.values.numel(); ++i) values[name].push_back(part.values.at(i));
    });
    return values;
  };
  CHECK(parameters(prefixed) == parameters(bare));
  const auto with_head = parameters(untied), tied_values = parameters(tied);
  CHECK(tied_values.count("lm_head.weight") == 0);  // the head is embed_tokens itself
  CHECK(tied_values.at("embed_tokens.weight") == with_head.at("embed_tokens.weight"));
  // the same file under a config that says untied: refused, naming the missing head
  std::filesystem::copy_file(untied / "config.json", tied / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::string message;
  try {
    parameters(tied);
  } catch (const sg::error& e) {
    message = e.what();
  }
  CHECK(message.find("lm_head.weight") != std::string::npos);
}

TEST_CASE("export_hf refuses what it cannot convert, by name", "[io][convert]") {
  const auto hf = scratch("refused-hf"), saved = scratch("refused-saved");
  sg::examples::write_random_hf_checkpoint(hf.string(), small("gpt2", sg::io::st_dtype::f32));
  import_under(hf.string(), saved.string(), sg::mesh_shape::parse("tp=2"));
  const std::string no_config =
      error_of([&] { sg::io::export_hf(saved.string(), scratch("refused-1").string()); });
  CHECK(contains(no_config, "config.json"));
  CHECK(contains(no_config, "--config"));
  // a config that says a larger vocabulary than the saved embedding's rows
  const auto big = scratch("refused-config");
  std::filesystem::create_directories(big);
  std::string text;
  {
    std::ifstream in(hf / "config.json");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto at = text.find("\"vocab_size\": 101");
  REQUIRE(at != std::string::npos);
  text.replace(at, 17, "\"vocab_size\": 500");
  std::ofstream(big / "config.json") << text;
  const std::string rows = error_of([&] {
    sg::io::export_hf(saved.string(), scratch("refused-2").string(),
                      {.config = (big / "config.json").string()});
  });
  CHECK(contains(rows, "wte.weight"));
  CHECK(contains(rows, "vocab_size 500"));
  // a config of another layer count than the checkpoint: refused before anything is written, as the
  // loader would refuse the result
  const std::pair<const char*, std::string> layer_counts[] = {
      {"2", saved.string() + ": 12 unused tensors (read by no parameter of the model that "},
      {"4", saved.string() + ": tensor 'transformer.h.3.ln_1.weight': expected a float tensor"}};
  for (const auto& [layers, expect] : layer_counts) {
    std::string other = text;
    other.replace(other.find("\"vocab_size\": 500"), 17, "\"vocab_size\": 101");
    const auto n_layer = other.find("\"n_layer\": 3");
    REQUIRE(n_layer != std::string::npos);
    other.replace(n_layer, 12, std::string("\"n_layer\": ") + layers);
    std::ofstream(big / "config.json") << other;
    const auto out = scratch("refused-layers");
    const std::string e = error_of(
        [&] { sg::io::export_hf(saved.string(), out.string(), {.config = (big / "config.json").string()}); });
    CAPTURE(e);
    CHECK(contains(e, expect));
    CHECK(!std::filesystem::exists(out));
  }
  const std::string not_saved = error_of([&] {
    sg::io::export_hf(hf.string(), scratch("refused-3").string(), {.config = (hf / "config.json").string()});
  });
  CHECK(contains(not_saved, "shardgraph-checkpoint.json"));
}
