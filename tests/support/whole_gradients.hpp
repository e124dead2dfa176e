#pragma once
// Whole gradients assembled from the slices every rank holds: add_gradient_slices(whole,
// rank.gradients()) on each rank, under a lock, writes that rank's slices into whole[name] (NaN
// where no rank has written yet); slices of a replicated weight must agree bit for bit.
// whole_gradients(...) does it for one forward and backward step on thread ranks.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/executor.hpp>
#include <shardgraph/threads.hpp>

#include "catch.hpp"

namespace test_support {

using gradient_map = std::map<std::string, std::vector<double>>;

template <class Gradients>
void add_gradient_slices(gradient_map& whole, const Gradients& grads) {
  for (const auto& [name, g] : grads) {
    std::vector<double>& dst = whole[name];
    if (dst.empty()) {
      std::int64_t n = 1;
      for (auto v : g.slice.global) n *= v;
      dst.assign(static_cast<std::size_t>(n), std::nan(""));
    }
    shardgraph::for_each_in_slice(g.slice, [&](std::int64_t global, std::int64_t local) {
      const double v = g.values.at(local);
      double& slot = dst[static_cast<std::size_t>(global)];
      if (!std::isnan(slot)) REQUIRE(slot == v);  // replicas hold identical bits
      slot = v;
    });
  }
}

// How far `have` lies from `want`: the largest |have - want| and the largest |want|.
struct gradient_difference {
  double diff = 0, scale = 0;
};
inline gradient_difference difference(const std::vector<double>& have, const std::vector<double>& want) {
  REQUIRE(have.size() == want.size());
  gradient_difference d;
  for (std::size_t i = 0; i < want.size(); ++i) {
    d.diff = std::max(d.diff, std::abs(have[i] - want[i]));
    d.scale = std::max(d.scale, std::abs(want[i]));
  }
  return d;
}

// Every gradient of `got` equals `reference`'s within `relative` of its largest value (none is all 0).
inline void check_same_gradients(const gradient_map& got, const gradient_map& reference, double relative) {
  REQUIRE(got.size() == reference.size());
  for (const auto& [name, want] : reference) {
    CAPTURE(name);
    const gradient_difference d = difference(got.at(name), want);
    REQUIRE(d.scale > 0);
    CHECK(d.diff <= relative * d.scale);
  }
}

// The sizes of a small model of batch, seq, model, ffn and vocab.
inline shardgraph::model_sizes tiny_sizes(std::int64_t batch, std::int64_t seq, std::int64_t model, std::int64_t ffn,
                                          std::int64_t vocab) {
  namespace sg = shardgraph;
  sg::model_sizes s;
  s.set(sg::size_symbol::batch, batch).set(sg::size_symbol::seq, seq).set(sg::size_symbol::vocab, vocab);
  s.set(sg::size_symbol::model, model).set(sg::size_symbol::ffn, ffn);
  return s;
}

// Inputs of a small model: "x" (batch, seq, width) f64 of sin(0.37 i), "targets" (batch, seq) i64
// of (5 i + 1) % vocab.
inline shardgraph::tensor_map sine_inputs(std::int64_t batch, std::int64_t seq, std::int64_t width,
                                          std::int64_t vocab) {
  namespace sg = shardgraph;
  std::vector<double> x(static_cast<std::size_t>(batch * seq * width));
  std::vector<std::int64_t> targets(static_cast<std::size_t>(batch * seq));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i));
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int64_t>((i * 5 + 1) % vocab);
  sg::tensor_map m;
  m.emplace("x", sg::host_tensor::from<double>({batch, seq, width}, x));
  m.emplace("targets", sg::host_tensor::from<std::int64_t>({batch, seq}, targets));
  return m;
}

// One forward and backward step of training program p on the thread ranks of `mesh` (cpu backend):
// the whole gradients, and rank 0's value of the output "loss" in *loss. `dropout`: the run's
// (rank_program::set_dropout; inactive by default, as forward() outside a training step).
inline gradient_map whole_gradients(const shardgraph::program& p, const shardgraph::model_sizes& sizes,
                                    const shardgraph::mesh_shape& mesh, const shardgraph::weight_source& weights,
                                    const shardgraph::tensor_map& inputs, double* loss,
                                    shardgraph::compute::dropout_run dropout = {}) {
  namespace sg = shardgraph;
  gradient_map whole;
  std::mutex m;
  sg::threads::world(mesh.world_size(p.nodes.axes)).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, mesh, weights);
    rank.set_dropout(dropout);
    auto out = rank.forward(inputs);
    auto grads = rank.gradients();
    std::lock_guard lock(m);
    if (comm.rank() == 0) *loss = out.at("loss").at(0);
    add_gradient_slices(whole, grads);
  });
  return whole;
}

}  // namespace test_support
