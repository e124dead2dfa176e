// The config options the golden cases take from HF (an untied GPT-2 head, GPT-2 without the
// attention scale, a GPT-2 MLP width other than 4 * model; a tied LLaMA head, LLaMA's attention
// and MLP biases, a head_dim other than model / heads): on every dp x tp layout the logits, the
// loss and every parameter gradient equal one rank's (f64, relative 1e-9).
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::models::gpt2_options gpt2_options{
    .type = sg::dtype::f64, .tie_word_embeddings = false, .scale_attn_weights = false};
constexpr sg::models::llama_options llama_options{
    .type = sg::dtype::f64, .tie_word_embeddings = true, .attention_bias = true, .mlp_bias = true};

constexpr sg::graph gpt2_sharded() { return sg::models::gpt2<Mesh>(gpt2_options); }
constexpr sg::graph gpt2_single() {
  sg::models::gpt2_options o = gpt2_options;
  o.data_axis = o.tensor_axis = "";
  return sg::models::gpt2<Mesh>(o);
}
constexpr sg::graph llama_sharded() { return sg::models::llama<Mesh>(llama_options); }
constexpr sg::graph llama_single() {
  sg::models::llama_options o = llama_options;
  o.data_axis = o.tensor_axis = "";
  return sg::models::llama<Mesh>(o);
}

constexpr sg::program gpt2_train = sg::compile<gpt2_sharded, sg::training{}>();
constexpr sg::program gpt2_train_single = sg::compile<gpt2_single, sg::training{}>();
constexpr sg::program llama_train = sg::compile<llama_sharded, sg::training{}>();
constexpr sg::program llama_train_single = sg::compile<llama_single, sg::training{}>();

// GPT-2 untied: wte and lm_head are two parameters (the tied model has 20 gradients).
static_assert(gpt2_train.count(sg::op::param_grad) == 21);
// LLaMA tied, with biases: 9 weights per layer and embed_tokens, norm; plus 7 biases per layer.
static_assert(llama_train.count(sg::op::param_grad) == 9 + 2 + 7);

constexpr std::int64_t batch = 4, seq = 8;
const sg::models::gpt2_config gpt2_tiny{
    .vocab = 64, .positions = 16, .model = 32, .heads = 4, .layers = 2, .ffn = 40};
const sg::models::llama_config llama_tiny{
    .vocab = 64, .model = 32, .ffn = 48, .heads = 8, .kv_heads = 4, .layers = 2, .head_dim = 6};

sg::tensor_map token_inputs() {
  std::vector<std::int64_t> ids(batch * seq), targets(batch * seq);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>((i * 37 + 11) % 64);
    targets[i] = static_cast<std::int64_t>((i * 53 + 7) % 64);
  }
  sg::tensor_map m;
  m.emplace("input_ids", sg::host_tensor::from<std::int64_t>({batch, seq}, ids));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, targets));
  return m;
}

struct run_result {
  std::map<std::string, std::vector<double>> gradients;  // whole, from every rank's slices
  std::vector<double> logits;
  double loss = 0;
};

run_result run_layout(const sg::program& p, const sg::model_sizes& sizes, int dp, int tp) {
  run_result r;
  std::mutex m;
  sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, sg::mesh_shape{{"dp", dp}, {"tp", tp}},
                         sg::random_weights(5, 0.3));
    auto out = rank.forward(token_inputs());
    auto grads = rank.gradients();
    std::lock_guard lock(m);
    if (comm.rank() == 0) {
      r.loss = out.at("loss").at(0);
      for (std::int64_t i = 0; i < out.at("logits").numel(); ++i) r.logits.push_back(out.at("logits").at(i));
    }
    for (auto& [name, g] : grads) {
      std::vector<double>& whole = r.gradients[name];
      if (whole.empty()) {
        std::int64_t n = 1;
        for (auto v : g.slice.global) n *= v;
        whole.assign(static_cast<std::size_t>(n), std::nan(""));
      }
      sg::for_each_in_slice(g.slice, [&](std::int64_t global, std::int64_t local) {
        whole[static_cast<std::size_t>(global)] = g.values.at(local);
      });
    }
  });
  return r;
}

// The largest difference and the largest reference magnitude; a slot no rank wrote (NaN) differs.
std::pair<double, double> difference(const std::vector<double>& have, const std::vector<double>& want) {
  REQUIRE(have.size() == want.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::isnan(have[i]) ? INFINITY : std::max(diff, std::abs(have[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return {diff, scale};
}

void check_layouts(const sg::program& sharded, const sg::program& single, const sg::model_sizes& sizes) {
  const run_result reference = run_layout(single, sizes, 1, 1);
  for (auto [dp, tp] : {std::pair{1, 2}, {2, 1}, {2, 2}, {1, 4}}) {
    CAPTURE(dp, tp);
    const run_result got = run_layout(sharded, sizes, dp, tp);
    CHECK(std::abs(got.loss - reference.loss) < 1e-12 * std::abs(reference.loss));
    const auto [logits_diff, logits_scale] = difference(got.logits, reference.logits);
    CHECK(logits_diff <= 1e-12 * logits_scale);
    REQUIRE(got.gradients.size() == reference.gradients.size());
    for (const auto& [name, want] : reference.gradients) {
      CAPTURE(name);
      // attention's key bias has a gradient that is zero in exact arithmetic (softmax ignores a
      // shift shared by all keys): rounding noise, hence the absolute floor
      const auto [diff, scale] = difference(got.gradients.at(name), want);
      CHECK(diff <= 1e-9 * scale + 1e-14);
    }
  }
}

}  // namespace

TEST_CASE("GPT-2 with an untied head, no attention scale and n_inner: every dp x tp layout equals one rank",
          "[models][training][threads]") {
  check_layouts(gpt2_train, gpt2_train_single, gpt2_tiny.sizes(batch, seq));
}

TEST_CASE("LLaMA with a tied head, biases and head_dim: every dp x tp layout equals one rank",
          "[models][training][threads]") {
  REQUIRE(llama_tiny.head_dim * llama_tiny.heads != llama_tiny.model);
  check_layouts(llama_train, llama_train_single, llama_tiny.sizes(batch, seq));
}
