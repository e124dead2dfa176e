// Golden data from outside for attention masks: torch's scaled_dot_product_attention and its
// autograd gradients (tests/golden/attention_masks, made by make_golden.py), causal or not, without
// a mask, under HF's attention_mask (padding) and under segment ids, with grouped-query heads,
// against cpu::scaled_dot_product_attention and its backward in f64.
#include <cstdint>
#include <string>
#include <vector>

#include <shardgraph/io/safetensors.hpp>

#include "catch.hpp"
#include "cpu/finite_differences.hpp"
#include "shardgraph/cpu/backward.hpp"
#include "shardgraph/cpu/kernels.hpp"

namespace sg = shardgraph;

using shardgraph::testing::finite_differences::relative_error;

TEST_CASE("golden: attention under causal, padding and segment masks equals torch's SDPA and its gradients",
          "[cpu][golden]") {
  const sg::io::safetensors_file golden(std::string(SHARDGRAPH_GOLDEN_DIR) + "/attention_masks/golden.safetensors");
  const auto& q_shape = golden.info("q").shape;
  const std::int64_t batch = q_shape.at(0), heads = q_shape.at(1), seq = q_shape.at(2), head_dim = q_shape.at(3);
  const std::int64_t kv_heads = golden.info("k").shape.at(1);
  const auto q = golden.read_as<double>("q"), k = golden.read_as<double>("k"), v = golden.read_as<double>("v"),
             dout = golden.read_as<double>("dout");
  const auto padding = golden.read_as<std::int64_t>("padding"), segments = golden.read_as<std::int64_t>("segments");
  for (const bool causal : {true, false})
    for (const auto kind : {sg::attention_mask::none, sg::attention_mask::padding, sg::attention_mask::segments}) {
      const std::string name = std::string(causal ? "causal" : "bidirectional") + "." +
                               (kind == sg::attention_mask::padding    ? "padding"
                                : kind == sg::attention_mask::segments ? "segments"
                                                                       : "none");
      CAPTURE(name);
      const sg::cpu::key_visibility seen{
          .masking = {.causal = causal, .mask = kind},
          .mask = kind == sg::attention_mask::segments ? segments.data() : padding.data()};
      std::vector<double> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
      sg::cpu::scaled_dot_product_attention(q.data(), k.data(), v.data(), out.data(), batch, heads, kv_heads, seq,
                                            head_dim, 0.0, seen);
      sg::cpu::scaled_dot_product_attention_backward(q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(),
                                                     dv.data(), batch, heads, kv_heads, seq, head_dim, 0.0, seen);
      CHECK(relative_error(out, golden.read_as<double>(name + ".out")) <= 1e-12);
      CHECK(relative_error(dq, golden.read_as<double>(name + ".dq")) <= 1e-12);
      CHECK(relative_error(dk, golden.read_as<double>(name + ".dk")) <= 1e-12);
      CHECK(relative_error(dv, golden.read_as<double>(name + ".dv")) <= 1e-12);
    }
}
