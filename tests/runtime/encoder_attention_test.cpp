// Encoder blocks: a non-causal attention under a padding mask, then a causal one over packed
// segments, trained one step forward and backward on one rank and on dp=2 x tp=2 thread ranks (the
// batch and the masks sharded over dp, the heads over tp): loss and every gradient equal one rank's
// (f64, relative 1e-9).
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
#include "support/whole_gradients.hpp"

namespace sg = shardgraph;

namespace {

using Mesh = sg::mesh<"dp", "tp">;

// x + attention(x wq, x wk, x wv, mask) wo: wq, wk, wv column parallel and wo row parallel over tp
// (Megatron's attention). The parameters are named "<layer>.wq", ...
constexpr sg::tensor attention_block(sg::builder<Mesh>& g, sg::tensor x, sg::tensor mask, std::string_view layer,
                                     sg::attention_options options) {
  using namespace sg::dim;
  const auto column = sg::on<"tp">(sg::shard<1>);
  const auto weight = [&](std::string_view name) {
    sg::name_buffer full;
    full.assign(layer);
    full.append(name);
    return full;
  };
  auto heads_of = [&](std::string_view name) {
    return sg::split_heads(sg::linear(x, g.param(weight(name).view(), {model, heads * head_dim}, column)));
  };
  auto attended = sg::attention(heads_of(".wq"), heads_of(".wk"), heads_of(".wv"), mask, options);
  auto wo = g.param(weight(".wo").view(), {heads * head_dim, model}, sg::on<"tp">(sg::shard<0>));
  return x + sg::linear(sg::merge_heads(attended), wo);
}

// A padded (bidirectional) block, a packed (causal, segment ids) block, a replicated head, the loss.
constexpr sg::graph encoder() {
  using namespace sg::dim;
  sg::builder<Mesh> g(sg::dtype::f64);
  const auto batch_on_dp = sg::on<"dp">(sg::shard<0>);
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f64, batch_on_dp);
  auto padding = g.input("padding", {batch, seq}, sg::dtype::i64, batch_on_dp);
  auto segments = g.input("segments", {batch, seq}, sg::dtype::i64, batch_on_dp);
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i64, batch_on_dp);
  auto h = attention_block(g, x, padding, "padded", {.causal = false});
  h = attention_block(g, h, segments, "packed", {.causal = true, .mask_kind = sg::attention_mask::segments});
  sg::output(sg::cross_entropy(sg::linear(h, g.param("head", {model, vocab})), targets), "loss");
  return g.finish();
}
constexpr sg::program train = sg::compile<encoder, sg::training{}>();

// Each attention and gradient reads its mask (a gradient's fifth input) under its forward's
// masking, and needs it sharded with the batch over dp, whole over tp (q is sharded over heads).
constexpr int attention_calls_reading(const sg::program& p, bool causal, sg::attention_mask kind) {
  int found = 0;
  for (int i = 0; i < p.nodes.size(); ++i) {
    const sg::node& n = p.nodes[i];
    const bool gradient = n.kind == sg::op::attention_grad_q || n.kind == sg::op::attention_grad_k ||
                          n.kind == sg::op::attention_grad_v;
    if (n.kind != sg::op::attention && !gradient) continue;
    if (n.masking.causal != causal || n.masking.mask != kind) continue;
    const int mask = sg::attention_mask_input(gradient);
    if (n.input_count == mask + 1 && n.required[mask][0].is_shard(0) && n.required[mask][1].is_replicate()) ++found;
  }
  return found;
}
static_assert(attention_calls_reading(train, false, sg::attention_mask::padding) == 4);
static_assert(attention_calls_reading(train, true, sg::attention_mask::segments) == 4);

constexpr std::int64_t n_batch = 4, n_seq = 5, n_model = 6, n_heads = 2, n_head_dim = 3, n_vocab = 7;

sg::model_sizes sizes() {
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, n_batch).set(sg::size_symbol::seq, n_seq).set(sg::size_symbol::vocab, n_vocab);
  s.set(sg::size_symbol::model, n_model).set(sg::size_symbol::heads, n_heads);
  s.set(sg::size_symbol::head_dim, n_head_dim);
  return s;
}

// Padding: row 0 whole, rows 1 and 2 right-padded, row 3 all padding (no query sees a key). Segment
// ids: packed documents of 2, 3, 5 and 1 + 4 tokens.
sg::tensor_map inputs() {
  sg::tensor_map m = test_support::sine_inputs(n_batch, n_seq, n_model, n_vocab);
  const std::vector<std::int64_t> padding{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<std::int64_t> segments{0, 0, 1, 1, 1, 4, 4, 4, 4, 4, 2, 3, 3, 3, 3, 9, 9, 9, 9, 9};
  m.emplace("padding", sg::host_tensor::from<std::int64_t>({n_batch, n_seq}, padding));
  m.emplace("segments", sg::host_tensor::from<std::int64_t>({n_batch, n_seq}, segments));
  return m;
}

}  // namespace

TEST_CASE("encoder blocks: padded bidirectional and packed causal attention train on dp=2 x tp=2 as on one rank",
          "[runtime][threads]") {
  double reference_loss = 0, loss = 0;
  const auto reference = test_support::whole_gradients(train, sizes(), {{"dp", 1}, {"tp", 1}},
                                                       sg::random_weights(7, 0.5), inputs(), &reference_loss);
  REQUIRE(reference.size() == 9);
  REQUIRE(std::isfinite(reference_loss));
  const auto got = test_support::whole_gradients(train, sizes(), {{"dp", 2}, {"tp", 2}}, sg::random_weights(7, 0.5),
                                                 inputs(), &loss);
  CHECK(std::abs(loss - reference_loss) < 1e-12 * std::abs(reference_loss));
  test_support::check_same_gradients(got, reference, 1e-9);
}
