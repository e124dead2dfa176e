// cpu::scaled_dot_product_attention and its backward, causal or not, without a mask, with a
// padding mask and with segment ids (ir/attention_masking.hpp), and as a cross-attention (keys of
// another length than the queries, not causal), against a naive loop over every
// (query, key) pair, and the backward against finite differences of the forward (in f64; f32
// against f64 on the same rounded inputs); and against torch's scaled_dot_product_attention and its
// autograd gradients (golden data: tests/golden/attention_masks, made by make_golden.py).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <shardgraph/io/safetensors.hpp>

#include "catch.hpp"
#include "cpu/finite_differences.hpp"
#include "shardgraph/cpu/backward.hpp"
#include "shardgraph/cpu/kernels.hpp"

namespace {

namespace cpu = shardgraph::cpu;
namespace sg = shardgraph;
using std::int64_t;
using namespace sg::testing::finite_differences;

constexpr int64_t batch = 2, heads = 4, seq = 5, head_dim = 3;

// Batch row 0 pads its first and last keys; batch row 1 pads every key (each of its queries sees
// none). Segment ids: row 0 holds three documents, row 1 two.
const std::vector<int64_t> padding = {0, 1, 1, 1, 0, 0, 0, 0, 0, 0};
const std::vector<int64_t> segments = {7, 7, 3, 3, 3, 1, 2, 2, 2, 2};
// A cross-attention's queries per (batch, head), over the seq keys (and the padding mask) above.
constexpr int64_t queries = 3, cross_kv_heads = 2;
constexpr cpu::attention_sizes cross_sizes{batch, heads, cross_kv_heads, queries, head_dim, seq};

const std::vector<int64_t>* mask_of(sg::attention_mask kind) {
  return kind == sg::attention_mask::padding ? &padding : kind == sg::attention_mask::segments ? &segments : nullptr;
}
cpu::key_visibility visibility(bool causal, sg::attention_mask kind) {
  const auto* mask = mask_of(kind);
  return {.masking = {.causal = causal, .mask = kind}, .mask = mask != nullptr ? mask->data() : nullptr};
}

// softmax(q k^T / sqrt(head_dim)) v over the pairs `seen` lets through, written out pair by pair;
// 0 for a query that sees no key. q holds `queries` per (batch, head), k and v `seq` (a
// cross-attention where they differ).
vector naive_attention(const vector& q, const vector& k, const vector& v, int64_t kv_heads, bool causal,
                       sg::attention_mask kind, int64_t queries = seq) {
  const auto* mask = mask_of(kind);
  const auto seen = [&](int64_t b, int64_t i, int64_t j) {
    if (causal && j > i) return false;
    if (kind == sg::attention_mask::padding) return (*mask)[b * seq + j] == 1;
    if (kind == sg::attention_mask::segments) return (*mask)[b * seq + i] == (*mask)[b * seq + j];
    return true;
  };
  vector out(q.size(), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < queries; ++i) {
        const int64_t kv = h / (heads / kv_heads);
        const double* qi = &q[((b * heads + h) * queries + i) * head_dim];
        std::vector<double> weight(seq, 0.0);
        double total = 0;
        for (int64_t j = 0; j < seq; ++j) {
          if (!seen(b, i, j)) continue;
          double score = 0;
          for (int64_t d = 0; d < head_dim; ++d) score += qi[d] * k[((b * kv_heads + kv) * seq + j) * head_dim + d];
          weight[j] = std::exp(score / std::sqrt(double(head_dim)));
          total += weight[j];
        }
        for (int64_t j = 0; j < seq; ++j)
          for (int64_t d = 0; d < head_dim; ++d)
            out[((b * heads + h) * queries + i) * head_dim + d] +=
                total > 0 ? weight[j] / total * v[((b * kv_heads + kv) * seq + j) * head_dim + d] : 0.0;
      }
  return out;
}

}  // namespace

TEST_CASE("scaled_dot_product_attention: causal or not, with no mask, padding or segments, equals a naive loop",
          "[cpu]") {
  for (int64_t kv_heads : {int64_t(4), int64_t(2)})
    for (bool causal : {true, false})
      for (auto kind : {sg::attention_mask::none, sg::attention_mask::padding, sg::attention_mask::segments}) {
        CAPTURE(kv_heads, causal, int(kind));
        const auto q = random_values(batch * heads * seq * head_dim, 41, -2, 2);
        const auto k = random_values(batch * kv_heads * seq * head_dim, 42, -2, 2);
        const auto v = random_values(batch * kv_heads * seq * head_dim, 43);
        vector out(q.size(), 9.0);  // stale, overwritten
        cpu::scaled_dot_product_attention(q.data(), k.data(), v.data(), out.data(), batch, heads, kv_heads, seq,
                                          head_dim, 0.0, visibility(causal, kind));
        CHECK(relative_error(out, naive_attention(q, k, v, kv_heads, causal, kind)) <= 1e-12);
        if (kind == sg::attention_mask::padding)  // batch row 1 sees no key: 0, not NaN or uniform
          for (std::size_t i = out.size() / 2; i < out.size(); ++i) REQUIRE(out[i] == 0.0);
      }
}

TEST_CASE("scaled_dot_product_attention_backward matches finite differences under every mask, in f64 and f32, "
          "and as a cross-attention",
          "[cpu]") {
  const int64_t kv_heads = 2;
  for (const int64_t length : {seq, queries})  // the queries' length: the keys', then a cross-attention's
  for (bool causal : {true, false})
    for (auto kind : {sg::attention_mask::none, sg::attention_mask::padding, sg::attention_mask::segments}) {
      if (length != seq && (causal || kind == sg::attention_mask::segments)) continue;  // refused
      CAPTURE(length, causal, int(kind));
      const cpu::attention_sizes sizes{batch, heads, kv_heads, length, head_dim, seq};
      const auto seen = visibility(causal, kind);
      const auto q = random_values(batch * heads * length * head_dim, 51, -2, 2);
      const auto k = random_values(batch * kv_heads * seq * head_dim, 52, -2, 2);
      const auto v = random_values(batch * kv_heads * seq * head_dim, 53);
      const auto dout = random_values(q.size(), 54);
      auto loss = [&](const vector& q_, const vector& k_, const vector& v_) {
        vector out(q_.size());
        cpu::scaled_dot_product_attention(q_.data(), k_.data(), v_.data(), out.data(), sizes, 0.0, seen);
        return dot(dout, out);
      };
      auto gradients = [&]<class T>(const std::vector<T>& q_, const std::vector<T>& k_, const std::vector<T>& v_,
                                    const std::vector<T>& dout_) {
        std::vector<T> dq(q_.size(), T(7)), dk(k_.size(), T(7)), dv(v_.size(), T(7));  // stale, overwritten
        cpu::scaled_dot_product_attention_backward(q_.data(), k_.data(), v_.data(), dout_.data(), dq.data(),
                                                   dk.data(), dv.data(), sizes, 0.0, seen);
        return std::array{dq, dk, dv};
      };
      const auto [dq, dk, dv] = check_attention_gradients(q, k, v, dout, loss, gradients);
      if (kind == sg::attention_mask::padding) {  // batch row 1 sees no key: no gradient at all
        for (std::size_t i = dq.size() / 2; i < dq.size(); ++i) REQUIRE(dq[i] == 0.0);
        for (std::size_t i = dk.size() / 2; i < dk.size(); ++i) REQUIRE((dk[i] == 0.0 && dv[i] == 0.0));
      }
    }
}

TEST_CASE("golden: attention under causal, padding and segment masks equals torch's SDPA and its gradients",
          "[cpu][golden]") {
  const sg::io::safetensors_file golden(std::string(SHARDGRAPH_GOLDEN_DIR) + "/attention_masks/golden.safetensors");
  const auto& q_shape = golden.info("q").shape;
  // the golden data's own sizes: batch, heads, kv_heads, seq, head_dim
  const std::int64_t sizes[5] = {q_shape.at(0), q_shape.at(1), golden.info("k").shape.at(1), q_shape.at(2),
                                 q_shape.at(3)};
  const auto q = golden.read_as<double>("q"), k = golden.read_as<double>("k"), v = golden.read_as<double>("v"),
             dout = golden.read_as<double>("dout");
  const auto hf_padding = golden.read_as<std::int64_t>("padding");
  const auto segment_ids = golden.read_as<std::int64_t>("segments");
  for (const bool causal : {true, false})
    for (const auto kind : {sg::attention_mask::none, sg::attention_mask::padding, sg::attention_mask::segments}) {
      const std::string name = std::string(causal ? "causal" : "bidirectional") + "." +
                               (kind == sg::attention_mask::padding    ? "padding"
                                : kind == sg::attention_mask::segments ? "segments"
                                                                       : "none");
      CAPTURE(name);
      const sg::cpu::key_visibility seen{
          .masking = {.causal = causal, .mask = kind},
          .mask = kind == sg::attention_mask::segments ? segment_ids.data() : hf_padding.data()};
      std::vector<double> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
      sg::cpu::scaled_dot_product_attention(q.data(), k.data(), v.data(), out.data(), sizes[0], sizes[1], sizes[2],
                                            sizes[3], sizes[4], 0.0, seen);
      sg::cpu::scaled_dot_product_attention_backward(q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(),
                                                     dv.data(), sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], 0.0,
                                                     seen);
      CHECK(relative_error(out, golden.read_as<double>(name + ".out")) <= 1e-12);
      CHECK(relative_error(dq, golden.read_as<double>(name + ".dq")) <= 1e-12);
      CHECK(relative_error(dk, golden.read_as<double>(name + ".dk")) <= 1e-12);
      CHECK(relative_error(dv, golden.read_as<double>(name + ".dv")) <= 1e-12);
    }
}

TEST_CASE("cross-attention: queries over keys of another length, masked or not, equal a naive loop",
          "[cpu]") {
  for (auto kind : {sg::attention_mask::none, sg::attention_mask::padding}) {
    CAPTURE(int(kind));
    const auto q = random_values(batch * heads * queries * head_dim, 61, -2, 2);
    const auto k = random_values(batch * cross_kv_heads * seq * head_dim, 62, -2, 2);
    const auto v = random_values(batch * cross_kv_heads * seq * head_dim, 63);
    vector out(q.size(), 9.0);  // stale, overwritten
    cpu::scaled_dot_product_attention(q.data(), k.data(), v.data(), out.data(), cross_sizes, 0.0,
                                      visibility(false, kind));
    CHECK(relative_error(out, naive_attention(q, k, v, cross_kv_heads, false, kind, queries)) <= 1e-12);
    if (kind == sg::attention_mask::padding)  // batch row 1 sees no key: 0
      for (std::size_t i = out.size() / 2; i < out.size(); ++i) REQUIRE(out[i] == 0.0);
  }
}

TEST_CASE("cross-attention: a causal call over keys of another length is refused", "[cpu]") {
  const vector q(batch * heads * queries * head_dim, 0.1), kv(batch * cross_kv_heads * seq * head_dim, 0.1);
  vector out(q.size());
  std::string message;
  try {
    cpu::scaled_dot_product_attention(q.data(), kv.data(), kv.data(), out.data(), cross_sizes, 0.0,
                                      cpu::key_visibility{});
  } catch (const sg::error& e) {
    message = e.what();
  }
  CHECK(message.find("a causal attention over 5 keys for 3 queries") != std::string::npos);
}
