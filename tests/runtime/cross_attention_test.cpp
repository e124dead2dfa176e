// A decoder block over an encoder's states (cross-attention: queries of seq, keys and values of the
// encoder's own length "source", not causal, with the encoder's key padding mask), trained one step
// forward and backward on one rank and on dp=2 x tp=2 thread ranks (the batch and the mask sharded
// over dp, the heads over tp): loss and every gradient equal one rank's (f64, relative 1e-9).
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/dsl/ops.hpp>
#include <shardgraph/passes/compile.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"
#include "support/whole_gradients.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;
constexpr sg::extent source = sg::dim::named<"source">;

// A decoder's cross-attention sublayer, x + (attention(x wq, memory wk, memory wv, memory_mask) +
// attention(the same, unmasked, scale 0.5)) wo: x (batch, seq, model), memory (batch, source, model);
// wq, wk, wv column parallel and wo row parallel over tp (Megatron's attention).
constexpr sg::graph decoder() {
  using namespace sg::dim;
  sg::builder<Mesh> g(sg::dtype::f64);
  const auto batch_on_dp = sg::on<"dp">(sg::shard<0>);
  const auto column = sg::on<"tp">(sg::shard<1>);
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f64, batch_on_dp);
  auto memory = g.input("memory", {batch, source, model}, sg::dtype::f64, batch_on_dp);
  auto memory_mask = g.input("memory_mask", {batch, source}, sg::dtype::i64, batch_on_dp);
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i64, batch_on_dp);
  auto heads_of = [&](sg::tensor from, std::string_view name) {
    return sg::split_heads(sg::linear(from, g.param(name, {model, heads * head_dim}, column)));
  };
  auto q = heads_of(x, "wq");
  auto k = heads_of(memory, "wk"), v = heads_of(memory, "wv");
  auto masked = sg::attention(q, k, v, memory_mask, {.causal = false});  // (batch, heads, seq, head_dim)
  auto whole = sg::attention(q, k, v, {.causal = false, .scale = 0.5});
  auto wo = g.param("wo", {heads * head_dim, model}, sg::on<"tp">(sg::shard<0>));
  auto h = x + sg::linear(sg::merge_heads(masked + whole), wo);
  sg::output(sg::cross_entropy(sg::linear(h, g.param("head", {model, vocab})), targets), "loss");
  return g.finish();
}
constexpr sg::program train = sg::compile<decoder, sg::training{}>();
static_assert(train.count(sg::op::attention) == 2 && train.count(sg::op::attention_grad_k) == 2);
static_assert(train.count(sg::op::all_gather) == 0);  // batch on dp, heads on tp: nothing gathered

constexpr std::int64_t n_batch = 4, n_seq = 3, n_source = 5, n_model = 6, n_heads = 2, n_head_dim = 3,
                       n_vocab = 7;

sg::model_sizes sizes() {
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, n_batch)
      .set(sg::size_symbol::seq, n_seq)
      .set(sg::size_symbol::vocab, n_vocab);
  s.set(sg::size_symbol::model, n_model).set(sg::size_symbol::heads, n_heads);
  s.set(sg::size_symbol::head_dim, n_head_dim).set("source", n_source);
  return s;
}

// The encoder's states and its padding: row 0 whole, rows 1 and 2 right-padded, row 3 all padding
// (its queries see no key: output 0, no gradient through the masked attention).
sg::tensor_map inputs() {
  sg::tensor_map m = test_support::sine_inputs(n_batch, n_seq, n_model, n_vocab);
  std::vector<double> memory(n_batch * n_source * n_model);
  for (std::size_t i = 0; i < memory.size(); ++i) memory[i] = std::cos(0.29 * static_cast<double>(i) + 0.1);
  const std::vector<std::int64_t> padding{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  m.emplace("memory", sg::host_tensor::from<double>({n_batch, n_source, n_model}, memory));
  m.emplace("memory_mask", sg::host_tensor::from<std::int64_t>({n_batch, n_source}, padding));
  return m;
}

}  // namespace

TEST_CASE("cross-attention: a decoder over encoder states trains on dp=2 x tp=2 as on one rank",
          "[runtime][threads]") {
  double reference_loss = 0, loss = 0;
  const auto reference = test_support::whole_gradients(train, sizes(), {{"dp", 1}, {"tp", 1}},
                                                       sg::random_weights(9, 0.5), inputs(), &reference_loss);
  REQUIRE(reference.size() == 5);
  REQUIRE(std::isfinite(reference_loss));
  const auto got = test_support::whole_gradients(train, sizes(), {{"dp", 2}, {"tp", 2}},
                                                 sg::random_weights(9, 0.5), inputs(), &loss);
  CHECK(std::abs(loss - reference_loss) < 1e-12 * std::abs(reference_loss));
  test_support::check_same_gradients(got, reference, 1e-9);
}
