// Golden data from outside (DESIGN §6.3): logits and loss of HF transformers' GPT2LMHeadModel
// and LlamaForCausalLM on the weights and tokens in tests/golden (made by make_golden.py),
// against shardgraph on one rank and on sharded layouts, reading the checkpoints and configs
// with shardgraph's own safetensors and JSON readers. The vocabulary (61) divides no tp in
// {2, 3, 4}: those layouts pad it, and the padding must change neither the loss nor the
// gradients; a quarter of the targets are -100, which the loss leaves out of its mean.
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/io/hf_config.hpp>
#include <shardgraph/io/hf_weights.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::graph gpt2_graph() { return sg::models::gpt2<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::graph llama_graph() { return sg::models::llama<Mesh>({.type = sg::dtype::f64}); }
constexpr sg::program gpt2 = sg::compile<gpt2_graph>();
constexpr sg::program llama = sg::compile<llama_graph>();
constexpr sg::program gpt2_training = sg::compile<gpt2_graph, sg::training{}>();
constexpr sg::program llama_training = sg::compile<llama_graph, sg::training{}>();

const std::string golden_dir = SHARDGRAPH_GOLDEN_DIR;

struct golden_case {
  sg::io::safetensors_file expected;
  sg::tensor_map inputs;
  std::int64_t batch, seq;
};

golden_case load_golden(const std::string& model) {
  golden_case c{sg::io::safetensors_file(golden_dir + "/" + model + "/golden.safetensors"), {}, 0, 0};
  const auto& shape = c.expected.info("input_ids").shape;
  c.batch = shape.at(0);
  c.seq = shape.at(1);
  for (const char* name : {"input_ids", "targets"})
    c.inputs.emplace(name, sg::host_tensor::from<std::int64_t>({c.batch, c.seq}, c.expected.read_as<std::int64_t>(name)));
  return c;
}

// The model's sizes with its vocabulary padded to a multiple of tp, as open_hf_model does.
template <class Config>
sg::model_sizes padded_sizes(Config config, const golden_case& g, int tp) {
  config.padded_vocab = (config.vocab + tp - 1) / tp * tp;
  return config.sizes(g.batch, g.seq);
}

sg::tensor_map run(const sg::program& p, const sg::model_sizes& sizes, const sg::weight_source& weights,
                   const sg::tensor_map& inputs, int dp, int tp) {
  sg::tensor_map result;
  sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}, {"tp", tp}}, weights);
    auto out = rank.forward(inputs);
    if (comm.rank() == 0) result = std::move(out);
  });
  return result;
}

// max |got - expected| / max |expected| over rows of `columns` values: got's rows may be longer
// (a padded vocabulary's logits), their first `columns` are compared.
double relative_difference(const sg::host_tensor& got, const std::vector<double>& expected, std::int64_t columns) {
  const std::int64_t rows = static_cast<std::int64_t>(expected.size()) / columns;
  const std::int64_t width = got.shape().empty() ? 1 : got.shape().back();
  REQUIRE(got.numel() == rows * width);
  double diff = 0, scale = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < columns; ++c) {
      const double want = expected[static_cast<std::size_t>(r * columns + c)];
      diff = std::max(diff, std::abs(got.at(r * width + c) - want));
      scale = std::max(scale, std::abs(want));
    }
  return diff / scale;
}

using layouts = std::vector<std::pair<int, int>>;  // (dp, tp)

template <class Config>
void check_against_hf(const sg::program& p, const Config& config, const sg::weight_source& weights,
                      const golden_case& g, double tolerance,
                      const layouts& dp_tp = {{1, 1}, {2, 2}, {1, 3}, {2, 4}, {4, 1}}) {
  const std::vector<double> logits = g.expected.read_as<double>("logits");
  const std::vector<double> loss = g.expected.read_as<double>("loss");
  for (auto [dp, tp] : dp_tp) {
    CAPTURE(dp, tp);
    sg::tensor_map out = run(p, padded_sizes(config, g, tp), weights, g.inputs, dp, tp);
    CHECK(relative_difference(out.at("logits"), logits, config.vocab) < tolerance);
    CHECK(relative_difference(out.at("loss"), loss, 1) < tolerance);
  }
}

}  // namespace

TEST_CASE("GPT-2 logits and loss equal HF transformers' GPT2LMHeadModel", "[golden][models]") {
  golden_case g = load_golden("gpt2");
  sg::models::gpt2_config config = sg::io::hf_gpt2_config(golden_dir + "/gpt2/config.json");
  auto file = std::make_shared<const sg::io::safetensors_file>(golden_dir + "/gpt2/model.safetensors");
  // GPT-2 is float64 throughout in HF, so agreement is to rounding.
  check_against_hf(gpt2, config, sg::io::hf_gpt2_weights(file, config.model, nullptr, config.vocab), g, 1e-10);
}

TEST_CASE("LLaMA (grouped-query attention) logits and loss equal HF transformers' LlamaForCausalLM", "[golden][models]") {
  golden_case g = load_golden("llama");
  sg::models::llama_config config = sg::io::hf_llama_config(golden_dir + "/llama/config.json");
  REQUIRE(config.kv_heads < config.heads);
  auto file = std::make_shared<const sg::io::safetensors_file>(golden_dir + "/llama/model.safetensors");
  // HF computes RMSNorm, RoPE angles and the attention softmax in float32 even in a float64
  // model (tests/golden/README.md), so agreement is to float32 rounding.
  check_against_hf(llama, config, sg::io::hf_llama_weights(file, nullptr, config.vocab), g, 1e-5);
}

TEST_CASE("a config that disagrees with the compiled model is refused with the key named", "[golden][io]") {
  try {
    sg::io::hf_llama_config(golden_dir + "/llama/config.json", {.rms_norm_eps = 1e-5});
    FAIL("no error");
  } catch (const sg::error& e) {
    CHECK(std::string(e.what()).find("rms_norm_eps") != std::string::npos);
  }
  try {
    sg::io::hf_gpt2_config(golden_dir + "/llama/config.json");
    FAIL("no error");
  } catch (const sg::error& e) {
    CHECK(std::string(e.what()).find("model_type is \"llama\"") != std::string::npos);
  }
}

namespace {

// The place in the file's tensor (shape `file`) of element `global` of the model's (shape
// `model`), its last coordinate moved by `column_shift`; -1 for a padded vocabulary's row, which
// the file does not have.
std::int64_t index_in_file(std::int64_t global, const std::vector<std::int64_t>& model,
                           const std::vector<std::int64_t>& file, std::int64_t column_shift) {
  std::vector<std::int64_t> coordinate(model.size());
  for (std::size_t d = model.size(); d-- > 0;) {
    coordinate[d] = global % model[d];
    global /= model[d];
  }
  coordinate.back() += column_shift;
  if (coordinate[0] >= file[0]) return -1;
  std::int64_t index = 0;
  for (std::size_t d = 0; d < file.size(); ++d) index = index * file[d] + coordinate[d];
  return index;
}

// Runs the training program on dp x tp ranks and checks every parameter gradient slice against
// HF's gradient (golden "grad.<hf name>"), located through the same name map the loader uses;
// a padded vocabulary's rows must get none.
template <class Config, class Locate>
void check_gradients_against_hf(const sg::program& p, const Config& config, const sg::weight_source& weights,
                                const golden_case& g, Locate locate, double tolerance,
                                const layouts& dp_tp = {{1, 1}, {2, 2}, {1, 3}, {1, 4}, {2, 3}}) {
  for (auto [dp, tp] : dp_tp) {
    CAPTURE(dp, tp);
    std::mutex m;
    int checked = 0;
    sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
      auto rank = sg::bind(p, padded_sizes(config, g, tp), comm, sg::cpu::backend{},
                           sg::mesh_shape{{"dp", dp}, {"tp", tp}}, weights);
      rank.forward(g.inputs);
      for (auto& [name, grad] : rank.gradients()) {
        sg::io::detail::hf_location where = locate(name);
        const sg::io::tensor_info& info = g.expected.info("grad." + where.name);
        const std::vector<double> expected = g.expected.read_as<double>("grad." + where.name);
        double diff = 0, scale = 0, padding = 0;
        for (double e : expected) scale = std::max(scale, std::abs(e));
        sg::for_each_in_slice(grad.slice, [&](std::int64_t global, std::int64_t local) {
          const std::int64_t at = index_in_file(global, grad.slice.global, info.shape, where.column_shift);
          if (at < 0)
            padding = std::max(padding, std::abs(grad.values.at(local)));
          else
            diff = std::max(diff, std::abs(grad.values.at(local) - expected[static_cast<std::size_t>(at)]));
        });
        std::lock_guard lock(m);
        CAPTURE(name);
        CHECK(diff <= tolerance * scale + 1e-14);
        CHECK(padding == 0);
        ++checked;
      }
    });
    CHECK(checked > 0);
  }
}

}  // namespace

TEST_CASE("GPT-2 parameter gradients equal HF transformers' (loss.backward())", "[golden][training]") {
  golden_case g = load_golden("gpt2");
  sg::models::gpt2_config config = sg::io::hf_gpt2_config(golden_dir + "/gpt2/config.json");
  auto file = std::make_shared<const sg::io::safetensors_file>(golden_dir + "/gpt2/model.safetensors");
  check_gradients_against_hf(gpt2_training, config, sg::io::hf_gpt2_weights(file, config.model, nullptr, config.vocab), g,
                             [&](const std::string& name) { return sg::io::detail::gpt2_location(name, config.model, "transformer."); },
                             1e-9);
}

TEST_CASE("LLaMA parameter gradients equal HF transformers' (loss.backward())", "[golden][training]") {
  golden_case g = load_golden("llama");
  sg::models::llama_config config = sg::io::hf_llama_config(golden_dir + "/llama/config.json");
  auto file = std::make_shared<const sg::io::safetensors_file>(golden_dir + "/llama/model.safetensors");
  check_gradients_against_hf(llama_training, config, sg::io::hf_llama_weights(file, nullptr, config.vocab), g,
                             [](const std::string& name) {
                               return sg::io::detail::hf_location{name == "lm_head.weight" ? name : "model." + name, 0};
                             },
                             1e-5);
}

// ---- the config options the two models above leave at their defaults (make_golden.py's OPTION_CASES)

namespace {

constexpr sg::graph gpt2_untied_graph() {
  return sg::models::gpt2<Mesh>({.type = sg::dtype::f64, .tie_word_embeddings = false});
}
constexpr sg::graph llama_tied_bias_headdim_graph() {
  return sg::models::llama<Mesh>(
      {.type = sg::dtype::f64, .tie_word_embeddings = true, .attention_bias = true, .mlp_bias = true});
}
constexpr sg::program gpt2_untied = sg::compile<gpt2_untied_graph>();
constexpr sg::program gpt2_untied_training = sg::compile<gpt2_untied_graph, sg::training{}>();
constexpr sg::program llama_tied_bias_headdim = sg::compile<llama_tied_bias_headdim_graph>();
constexpr sg::program llama_tied_bias_headdim_training =
    sg::compile<llama_tied_bias_headdim_graph, sg::training{}>();

}  // namespace

TEST_CASE("GPT-2 with an untied head (tie_word_embeddings false) and n_inner equals HF transformers'",
          "[golden][models][training]") {
  golden_case g = load_golden("gpt2_untied");
  const std::string dir = golden_dir + "/gpt2_untied";
  const sg::models::gpt2_options options =
      sg::io::hf_gpt2_options(dir + "/config.json", {.type = sg::dtype::f64});
  REQUIRE_FALSE(options.tie_word_embeddings);
  sg::models::gpt2_config config = sg::io::hf_gpt2_config(dir + "/config.json", options);
  REQUIRE(config.ffn != 4 * config.model);
  auto file = std::make_shared<const sg::io::safetensors_file>(dir + "/model.safetensors");
  REQUIRE(file->contains("lm_head.weight"));
  const sg::weight_source weights = sg::io::hf_gpt2_weights(file, config.model);
  check_against_hf(gpt2_untied, config, weights, g, 1e-10, {{1, 1}, {2, 2}, {1, 4}});
  check_gradients_against_hf(
      gpt2_untied_training, config, weights, g,
      [&](const std::string& name) {
        return sg::io::detail::gpt2_location(name, config.model, "transformer.");
      },
      1e-9, {{1, 1}, {2, 2}});
  // the tied program refuses this config, naming the field
  try {
    sg::io::hf_gpt2_config(dir + "/config.json", {.type = sg::dtype::f64});
    FAIL("no error");
  } catch (const sg::error& e) {
    CHECK(std::string(e.what()).find("tie_word_embeddings") != std::string::npos);
  }
}

TEST_CASE(
    "LLaMA with a tied head, attention and MLP biases and head_dim != hidden/heads equals HF transformers'",
    "[golden][models][training]") {
  golden_case g = load_golden("llama_tied_bias_headdim");
  const std::string dir = golden_dir + "/llama_tied_bias_headdim";
  const sg::models::llama_options options =
      sg::io::hf_llama_options(dir + "/config.json", {.type = sg::dtype::f64});
  REQUIRE((options.tie_word_embeddings && options.attention_bias && options.mlp_bias));
  sg::models::llama_config config = sg::io::hf_llama_config(dir + "/config.json", options);
  REQUIRE(config.head_dim * config.heads != config.model);
  auto file = std::make_shared<const sg::io::safetensors_file>(dir + "/model.safetensors");
  REQUIRE_FALSE(file->contains("lm_head.weight"));
  const sg::weight_source weights = sg::io::hf_llama_weights(file);
  check_against_hf(llama_tied_bias_headdim, config, weights, g, 1e-5, {{1, 1}, {2, 2}, {1, 4}});
  check_gradients_against_hf(
      llama_tied_bias_headdim_training, config, weights, g,
      [](const std::string& name) {
        return sg::io::detail::hf_location{sg::io::detail::llama_location(name), 0};
      },
      1e-5, {{1, 1}, {2, 2}});
  for (const char* option : {"attention_bias", "mlp_bias", "tie_word_embeddings"}) {
    CAPTURE(option);
    sg::models::llama_options other = options;
    if (std::string(option) == "attention_bias") other.attention_bias = false;
    if (std::string(option) == "mlp_bias") other.mlp_bias = false;
    if (std::string(option) == "tie_word_embeddings") other.tie_word_embeddings = false;
    try {
      sg::io::hf_llama_config(dir + "/config.json", other);
      FAIL("no error");
    } catch (const sg::error& e) {
      CHECK(std::string(e.what()).find(option) != std::string::npos);
    }
  }
}

namespace {
constexpr sg::graph gpt2_unscaled_graph() {
  return sg::models::gpt2<Mesh>({.type = sg::dtype::f64, .scale_attn_weights = false});
}
constexpr sg::program gpt2_unscaled = sg::compile<gpt2_unscaled_graph>();
constexpr sg::program gpt2_unscaled_training = sg::compile<gpt2_unscaled_graph, sg::training{}>();
}  // namespace

TEST_CASE("GPT-2 without the attention scale (scale_attn_weights false) equals HF transformers'",
          "[golden][models][training]") {
  golden_case g = load_golden("gpt2_unscaled");
  const std::string dir = golden_dir + "/gpt2_unscaled";
  const sg::models::gpt2_options options =
      sg::io::hf_gpt2_options(dir + "/config.json", {.type = sg::dtype::f64});
  REQUIRE_FALSE(options.scale_attn_weights);
  sg::models::gpt2_config config = sg::io::hf_gpt2_config(dir + "/config.json", options);
  auto file = std::make_shared<const sg::io::safetensors_file>(dir + "/model.safetensors");
  const sg::weight_source weights = sg::io::hf_gpt2_weights(file, config.model);
  check_against_hf(gpt2_unscaled, config, weights, g, 1e-10, {{1, 1}, {2, 2}, {1, 4}});
  check_gradients_against_hf(
      gpt2_unscaled_training, config, weights, g,
      [&](const std::string& name) {
        return sg::io::detail::gpt2_location(name, config.model, "transformer.");
      },
      1e-9, {{1, 1}, {2, 2}});
  try {
    sg::io::hf_gpt2_config(dir + "/config.json", {.type = sg::dtype::f64});
    FAIL("no error");
  } catch (const sg::error& e) {
    CHECK(std::string(e.what()).find("scale_attn_weights") != std::string::npos);
  }
}
