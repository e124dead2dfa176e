#pragma once
// What the training tests on thread ranks share: a tiny GPT-2, its token batches, a training run
// on a dp x tp mesh that returns the whole weights, and the distance between two sets of weights.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/trainer.hpp>
#include <shardgraph/shardgraph.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"

namespace tiny_gpt2 {

namespace sg = shardgraph;

using Mesh = sg::mesh<"dp", "tp">;

inline const sg::models::gpt2_config config{
    .vocab = 64, .positions = 16, .model = 32, .heads = 4, .layers = 2};
inline constexpr std::int64_t batch = 8, seq = 8;

// Rows [first_row, first_row + rows) of step `step`'s batch: deterministic ids and targets.
inline sg::tensor_map tokens(std::int64_t rows, std::int64_t first_row, int step) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(rows * seq)), targets(ids.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t t = 0; t < seq; ++t) {
      std::size_t i = static_cast<std::size_t>(r * seq + t);
      std::int64_t global = (first_row + r) * seq + t + 1000 * step;
      ids[i] = (global * 37 + 11) % 64;
      targets[i] = (global * 53 + 7) % 64;
    }
  sg::tensor_map m;
  m.emplace("input_ids", sg::host_tensor::from<std::int64_t>({rows, seq}, ids));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({rows, seq}, targets));
  return m;
}

inline const sg::training_options options{
    .adamw = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1},
    .schedule = std::nullopt,
    .max_grad_norm = 0.5};

using weights = std::map<std::string, std::vector<double>>;

// Writes each rank's slices (name -> (slice, values)) into the whole tensors they belong to.
template <class Parts>
void add_slices(const Parts& parts, weights& whole) {
  for (auto& [name, part] : parts) {
    std::vector<double>& dst = whole[name];
    std::int64_t n = 1;
    for (auto v : part.slice.global) n *= v;
    dst.resize(static_cast<std::size_t>(n));
    sg::for_each_in_slice(part.slice, [&](std::int64_t g, std::int64_t l) {
      dst[static_cast<std::size_t>(g)] = part.values.at(l);
    });
  }
}

// Trains `steps` steps on dp*tp ranks (each step: `micro` micro-batches splitting the batch) and
// returns the whole weights assembled from every rank's slices, plus rank 0's reports.
// make_backend() gives each rank its compute backend; `memory` is bind's memory options.
template <class MakeBackend>
weights train_on(MakeBackend make_backend, const sg::program& p, int dp, int tp, int steps, int micro,
                 std::vector<sg::step_report>* reports, const sg::training_options& o = options,
                 const sg::memory_options& memory = {}) {
  weights whole;
  std::mutex m;
  sg::threads::world(dp * tp).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, config.sizes(batch / micro, seq), comm, make_backend(),
                         sg::mesh_shape{{"dp", dp}, {"tp", tp}}, sg::random_weights(3, 0.3), {}, memory);
    sg::trainer t(rank, o);
    for (int s = 0; s < steps; ++s) {
      std::vector<sg::tensor_map> parts;
      for (int k = 0; k < micro; ++k) parts.push_back(tokens(batch / micro, k * (batch / micro), s));
      sg::step_report r = t.step(parts);
      if (comm.rank() == 0 && reports) reports->push_back(r);
    }
    auto params = rank.parameters();
    std::lock_guard lock(m);
    add_slices(params, whole);
  });
  return whole;
}

// The same on the cpu backend (the reference).
inline weights train(const sg::program& p, int dp, int tp, int steps, int micro,
                     std::vector<sg::step_report>* reports, const sg::training_options& o = options) {
  return train_on([] { return sg::cpu::backend{}; }, p, dp, tp, steps, micro, reports, o);
}

// The largest, over parameters, of max |a - b| / max |b|.
inline double max_relative_difference(const weights& a, const weights& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (auto& [name, want] : b) {
    const std::vector<double>& have = a.at(name);
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      diff = std::max(diff, std::abs(have[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace tiny_gpt2
