// An encoder block (non-causal attention, a padding mask or segment ids) trained one step forward
// and backward on one rank and on dp=2 x tp=2 thread ranks (the batch and the mask sharded over
// dp, the heads over tp): loss and every gradient equal one rank's (f64, relative 1e-9).
#include <cmath>
#include <cstdint>
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

// x + attention(x wq, x wk, x wv, mask) wo, then a replicated head to the vocabulary and the loss;
// wq, wk, wv column parallel and wo row parallel over tp (Megatron's attention).
template <bool Causal, sg::attention_mask Kind>
constexpr sg::graph encoder_block() {
  using namespace sg::dim;
  sg::builder<Mesh> g(sg::dtype::f64);
  const auto batch_on_dp = sg::on<"dp">(sg::shard<0>);
  auto x = g.input("x", {batch, seq, model}, sg::dtype::f64, batch_on_dp);
  auto mask = g.input("mask", {batch, seq}, sg::dtype::i64, batch_on_dp);
  auto targets = g.input("targets", {batch, seq}, sg::dtype::i64, batch_on_dp);
  const auto column = sg::on<"tp">(sg::shard<1>);
  auto heads_of = [&](const char* name) {
    return sg::split_heads(sg::linear(x, g.param(name, {model, heads * head_dim}, column)));
  };
  auto attended = sg::attention(heads_of("wq"), heads_of("wk"), heads_of("wv"), mask,
                                {.causal = Causal, .mask_kind = Kind});
  auto wo = g.param("wo", {heads * head_dim, model}, sg::on<"tp">(sg::shard<0>));
  auto h = x + sg::linear(sg::merge_heads(attended), wo);
  sg::output(sg::cross_entropy(sg::linear(h, g.param("head", {model, vocab})), targets), "loss");
  return g.finish();
}
constexpr sg::program padded = sg::compile<encoder_block<false, sg::attention_mask::padding>, sg::training{}>();
constexpr sg::program packed = sg::compile<encoder_block<true, sg::attention_mask::segments>, sg::training{}>();
static_assert(padded.count(sg::op::attention_grad_k) == 1);

// The gradients read the mask (their fifth input) under the forward's masking, and need it as the
// forward does: sharded with the batch over dp, whole over tp (q is sharded over heads there).
constexpr bool gradients_read_the_mask(const sg::program& p, bool causal, sg::attention_mask kind) {
  int found = 0;
  for (int i = 0; i < p.nodes.size(); ++i) {
    const sg::node& n = p.nodes[i];
    const bool gradient = n.kind == sg::op::attention_grad_q || n.kind == sg::op::attention_grad_k ||
                          n.kind == sg::op::attention_grad_v;
    if (n.kind == sg::op::attention || gradient) {
      const int mask = sg::attention_mask_input(gradient);
      if (n.input_count != mask + 1 || n.masking.causal != causal || n.masking.mask != kind ||
          !n.required[mask][0].is_shard(0) || !n.required[mask][1].is_replicate())
        return false;
      ++found;
    }
  }
  return found == 4;
}
static_assert(gradients_read_the_mask(padded, false, sg::attention_mask::padding));
static_assert(gradients_read_the_mask(packed, true, sg::attention_mask::segments));

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
sg::tensor_map inputs(const std::vector<std::int64_t>& mask) {
  sg::tensor_map m = test_support::sine_inputs(n_batch, n_seq, n_model, n_vocab);
  m.emplace("mask", sg::host_tensor::from<std::int64_t>({n_batch, n_seq}, mask));
  return m;
}
const std::vector<std::int64_t> padding{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
const std::vector<std::int64_t> segments{0, 0, 1, 1, 1, 4, 4, 4, 4, 4, 2, 3, 3, 3, 3, 9, 9, 9, 9, 9};

void check_layouts_agree(const sg::program& p, const std::vector<std::int64_t>& mask) {
  double reference_loss = 0, loss = 0;
  const auto reference = test_support::whole_gradients(p, sizes(), {{"dp", 1}, {"tp", 1}}, sg::random_weights(7, 0.5),
                                                       inputs(mask), &reference_loss);
  REQUIRE(reference.size() == 5);
  REQUIRE(std::isfinite(reference_loss));
  const auto got = test_support::whole_gradients(p, sizes(), {{"dp", 2}, {"tp", 2}}, sg::random_weights(7, 0.5),
                                                 inputs(mask), &loss);
  CHECK(std::abs(loss - reference_loss) < 1e-12 * std::abs(reference_loss));
  test_support::check_same_gradients(got, reference, 1e-9);
}

}  // namespace

TEST_CASE("encoder block: non-causal attention with a padding mask trains on dp=2 x tp=2 as on one rank",
          "[runtime][threads]") {
  check_layouts_agree(padded, padding);
}

TEST_CASE("encoder block: causal attention over packed segments trains on dp=2 x tp=2 as on one rank",
          "[runtime][threads]") {
  check_layouts_agree(packed, segments);
}
