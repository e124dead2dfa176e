#pragma once
// The cpu backend running the saved statistics (fused::attention_saved, cross_entropy_saved) as a
// GPU's flash attention and loss kernels do: a forward writes each row's log-sum-exp into
// kernel_call::saved, and its backward reads them there. Here the backward computes them again and
// compares, so a test sees whether the buffer the plan allocated still holds what its forward
// wrote (the right layer, the right micro-batch, nothing written over it in between).
//
//   sg::testing::saved_statistics_checks checks;
//   auto backend = sg::testing::cpu_checking_saved_statistics{&checks};
//   ... train ...; checks.read > 0 && checks.wrong == 0
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/cpu_fused_calls.hpp"

namespace shardgraph::testing {

struct saved_statistics_checks {
  int written = 0;  // forward calls that wrote their statistics
  int read = 0;     // backward calls that compared them
  int wrong = 0;    // of those, the ones that found other values
};

struct cpu_checking_saved_statistics : cpu_fused_calls {
  saved_statistics_checks* checks = nullptr;

  void run(const compute::kernel_call<buffer>& c) {
    const compute::fused_set kinds = compute::fused_kinds_of(c);
    const bool forward = c.kind == op::attention || c.kind == op::cross_entropy;
    if (c.saved != nullptr && (kinds.has(compute::fused::attention_saved) ||
                               kinds.has(compute::fused::cross_entropy_saved))) {
      const std::vector<double> lse = statistics_of(c);
      buffer& saved = *c.saved;
      if (forward) {
        for (std::size_t r = 0; r < lse.size(); ++r) put(saved, r, lse[r]);
        ++checks->written;
      } else {
        ++checks->read;
        bool same = static_cast<std::size_t>(saved.numel()) == lse.size();
        for (std::size_t r = 0; same && r < lse.size(); ++r) same = get(saved, r) == rounded(saved, lse[r]);
        checks->wrong += !same;
      }
    }
    cpu_fused_calls::run(c);
  }

 private:
  static double rounded(const buffer& b, double v) {
    return b.type() == dtype::f64 ? v : static_cast<double>(static_cast<float>(v));
  }
  static void put(buffer& b, std::size_t i, double v) {
    if (b.type() == dtype::f64)
      b.as<double>()[i] = v;
    else
      b.as<float>()[i] = static_cast<float>(v);
  }
  static double get(const buffer& b, std::size_t i) {
    return b.type() == dtype::f64 ? b.as<double>()[i] : static_cast<double>(b.as<float>()[i]);
  }
  static double value(const buffer& b, std::int64_t i) { return get(b, static_cast<std::size_t>(i)); }

  // log sum exp over the row's entries.
  static double log_sum_exp(const std::vector<double>& row) {
    const double top = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (double v : row) sum += std::exp(v - top);
    return top + std::log(sum);
  }

  // The call's rows' log-sum-exp: attention's causal scaled scores per (batch, head, query), or
  // the cross-entropy's logits [0, classes) per row.
  static std::vector<double> statistics_of(const compute::kernel_call<buffer>& c) {
    std::vector<double> lse;
    const std::int64_t* d = c.dims;
    if (c.kind == op::cross_entropy || c.kind == op::cross_entropy_grad) {  // rows, vocab, classes
      for (std::int64_t r = 0; r < d[0]; ++r) {
        std::vector<double> row;
        for (std::int64_t k = 0; k < d[2]; ++k) row.push_back(value(*c.in[0], r * d[1] + k));
        lse.push_back(log_sum_exp(row));
      }
      return lse;
    }
    const std::int64_t batch = d[0], heads = d[1], kv_heads = d[2], seq = d[3], dim = d[4];
    const double scale = compute::attention_scale(c.scalar, dim);
    const auto at = [&](std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t hs) {
      return (c.token_major ? (b * seq + t) * hs + h : (b * hs + h) * seq + t) * dim;
    };
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t i = 0; i < seq; ++i) {
          std::vector<double> row;
          for (std::int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (std::int64_t e = 0; e < dim; ++e)
              dot += value(*c.in[0], at(b, h, i, heads) + e) *
                     value(*c.in[1], at(b, h / (heads / kv_heads), j, kv_heads) + e);
            row.push_back(dot * scale);
          }
          lse.push_back(log_sum_exp(row));
        }
    return lse;
  }
};

}  // namespace shardgraph::testing
