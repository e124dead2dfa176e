// Golden data from outside for RoPE scaling: HF transformers' LlamaForCausalLM with rope_type
// linear (in the older rope_scaling spelling), dynamic (a sequence longer than
// max_position_embeddings), llama3 and yarn (tests/golden/llama_rope_*, made by make_golden.py):
// logits, loss and every parameter gradient on one rank and on sharded layouts, the model compiled
// with the RoPE that io::hf_rope_scaling reads from each config.json; and the frequency table
// bind plans against HF's own (golden "rope.inv_freq", "rope.attention_scaling").
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/io/hf_config.hpp>
#include <shardgraph/io/hf_rope.hpp>
#include <shardgraph/io/hf_weights.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
const std::string golden_dir = SHARDGRAPH_GOLDEN_DIR;
const char* const cases[] = {"llama_rope_linear", "llama_rope_dynamic", "llama_rope_llama3", "llama_rope_yarn"};

// One case: the programs compiled with the config's RoPE, its sizes, weights and HF's results.
struct rope_case {
  sg::models::llama_options options;
  sg::program forward, training;
  sg::model_sizes sizes;
  sg::weight_source weights;
  std::shared_ptr<const sg::io::safetensors_file> expected;
  sg::tensor_map inputs;
  std::int64_t seq = 0;
};

rope_case load_case(const std::string& name) {
  const std::string dir = golden_dir + "/" + name;
  const sg::io::json::value config = sg::io::read_json_file(dir + "/config.json");
  rope_case c;
  c.options = {.type = sg::dtype::f64,
               .rms_norm_eps = config.at("rms_norm_eps").as_double(),
               .rope = sg::io::hf_rope_scaling(config, dir + "/config.json")};
  const sg::models::llama_config sizes = sg::io::hf_llama_config(dir + "/config.json", c.options);
  c.forward = sg::compile_graph(sg::models::llama<Mesh>(c.options));
  c.training = sg::compile_graph(sg::models::llama<Mesh>(c.options), sg::training{});
  c.weights = sg::io::hf_llama_weights(std::make_shared<const sg::io::safetensors_file>(dir + "/model.safetensors"));
  c.expected = std::make_shared<const sg::io::safetensors_file>(dir + "/golden.safetensors");
  const auto& shape = c.expected->info("input_ids").shape;
  c.seq = shape.at(1);
  c.sizes = sizes.sizes(shape.at(0), c.seq);
  for (const char* input : {"input_ids", "targets"})
    c.inputs.emplace(input, sg::host_tensor::from<std::int64_t>({shape.at(0), c.seq},
                                                                c.expected->read_as<std::int64_t>(input)));
  return c;
}

double relative_difference(const sg::host_tensor& got, const std::vector<double>& expected) {
  REQUIRE(static_cast<std::size_t>(got.numel()) == expected.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    diff = std::max(diff, std::abs(got.at(static_cast<std::int64_t>(i)) - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return diff / scale;
}

// HF computes the RoPE angles, RMSNorm and softmax in float32 even in a float64 model
// (tests/golden/README.md): agreement is to float32 rounding.
constexpr double tolerance = 1e-5;

}  // namespace

TEST_CASE("RoPE scaling: the frequency table bind plans equals HF's for each kind", "[golden][models]") {
  for (const char* name : cases) {
    CAPTURE(name);
    const rope_case c = load_case(name);
    const std::vector<double> hf = c.expected->read_as<double>("rope.inv_freq");
    const sg::compute::rope_frequencies t =
        sg::compute::make_rope_frequencies(c.options.rope, 2 * static_cast<std::int64_t>(hf.size()), c.seq);
    REQUIRE(t.pairs == static_cast<std::int64_t>(hf.size()));
    for (std::size_t i = 0; i < hf.size(); ++i) CHECK(t.inverse_frequency[i] == Approx(hf[i]).epsilon(2e-6));
    CHECK(t.attention_factor == Approx(c.expected->read_as<double>("rope.attention_scaling").at(0)).epsilon(1e-12));
  }
}

TEST_CASE("RoPE scaling: LLaMA logits and loss equal HF's for linear, dynamic, llama3 and yarn", "[golden][models]") {
  for (const char* name : cases) {
    const rope_case c = load_case(name);
    const std::vector<double> logits = c.expected->read_as<double>("logits");
    const std::vector<double> loss = c.expected->read_as<double>("loss");
    for (auto [dp, tp] : {std::pair{1, 1}, {2, 2}, {1, 2}}) {
      CAPTURE(name, dp, tp);
      sg::tensor_map result;
      sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
        auto rank = sg::bind(c.forward, c.sizes, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}, {"tp", tp}},
                             c.weights);
        auto out = rank.forward(c.inputs);
        if (comm.rank() == 0) result = std::move(out);
      });
      CHECK(relative_difference(result.at("logits"), logits) < tolerance);
      CHECK(relative_difference(result.at("loss"), loss) < tolerance);
    }
  }
}

TEST_CASE("RoPE scaling: LLaMA parameter gradients equal HF's for linear, dynamic, llama3 and yarn",
          "[golden][training]") {
  for (const char* name : cases) {
    const rope_case c = load_case(name);
    for (auto [dp, tp] : {std::pair{1, 1}, {2, 2}}) {
      CAPTURE(name, dp, tp);
      std::mutex m;
      int checked = 0;
      sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
        auto rank = sg::bind(c.training, c.sizes, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}, {"tp", tp}},
                             c.weights);
        rank.forward(c.inputs);
        for (auto& [param, grad] : rank.gradients()) {
          const std::string hf_name = param == "lm_head.weight" ? param : "model." + param;
          const std::vector<double> expected = c.expected->read_as<double>("grad." + hf_name);
          sg::tensor_slice in_file = grad.slice;
          in_file.global = c.expected->info("grad." + hf_name).shape;
          double diff = 0, scale = 0;
          for (double e : expected) scale = std::max(scale, std::abs(e));
          sg::for_each_in_slice(in_file, [&](std::int64_t global, std::int64_t local) {
            diff = std::max(diff, std::abs(grad.values.at(local) - expected[static_cast<std::size_t>(global)]));
          });
          std::lock_guard lock(m);
          CAPTURE(param);
          CHECK(diff <= tolerance * scale + 1e-14);
          ++checked;
        }
      });
      CHECK(checked == 12 * dp * tp);  // on each rank: 2 tables, 7 matrices, 3 norms
    }
  }
}

TEST_CASE("RoPE scaling: a config whose RoPE differs from the compiled model's is refused", "[golden][io]") {
  const std::string path = golden_dir + "/llama_rope_yarn/config.json";
  CHECK_THAT(sg::testing::error_of([&] { sg::io::hf_llama_config(path, {.type = sg::dtype::f64}); }),
             sg::testing::ContainsSubstring(
                 "llama_rope_yarn/config.json: rope_parameters: the checkpoint's RoPE (rope_type \"yarn\") differs "
                 "from the compiled model's (rope_type \"default\")"));
}
