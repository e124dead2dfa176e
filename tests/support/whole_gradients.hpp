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

// Every gradient of `got` within relative 1e-9 of `reference`'s (of the largest magnitude), by name.
inline void check_same_gradients(const gradient_map& got, const gradient_map& reference) {
  REQUIRE(got.size() == reference.size());
  for (const auto& [name, want] : reference) {
    CAPTURE(name);
    const gradient_difference d = difference(got.at(name), want);
    REQUIRE(d.scale > 0);
    CHECK(d.diff <= 1e-9 * d.scale);
  }
}

// One forward and backward step of training program p on the thread ranks of `mesh` (cpu backend):
// the whole gradients, and rank 0's value of the output "loss" in *loss.
inline gradient_map whole_gradients(const shardgraph::program& p, const shardgraph::model_sizes& sizes,
                                    const shardgraph::mesh_shape& mesh, const shardgraph::weight_source& weights,
                                    const shardgraph::tensor_map& inputs, double* loss) {
  namespace sg = shardgraph;
  gradient_map whole;
  std::mutex m;
  sg::threads::world(mesh.world_size(p.nodes.axes)).run([&](sg::threads::communicator& comm) {
    auto rank = sg::bind(p, sizes, comm, sg::cpu::backend{}, mesh, weights);
    auto out = rank.forward(inputs);
    auto grads = rank.gradients();
    std::lock_guard lock(m);
    if (comm.rank() == 0) *loss = out.at("loss").at(0);
    add_gradient_slices(whole, grads);
  });
  return whole;
}

}  // namespace test_support
