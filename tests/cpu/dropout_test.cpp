// cpu::dropout: the mask of compute/dropout_mask.hpp. It keeps about 1 - p of the elements and
// scales them by 1 / (1 - p); a block of a sharded tensor draws the mask of the same elements of
// the whole tensor; the step and the layer change the mask; p = 0 and an inactive run copy x.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "catch.hpp"
#include "shardgraph/cpu/kernels.hpp"

namespace {

namespace cpu = shardgraph::cpu;
namespace compute = shardgraph::compute;
using std::int64_t;

// The mask of a whole tensor (d0, d1, d2, d3): no block offset.
compute::dropout_mask whole_mask(const int64_t (&dims)[4], std::uint64_t seed, std::uint64_t step) {
  compute::dropout_mask m;
  m.seed = seed;
  m.run = {.active = true, .step = step};
  for (int k = 0; k < 4; ++k) m.whole[k] = dims[k];
  return m;
}

std::vector<double> ramp(int64_t n) {
  std::vector<double> x(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1.0 + 0.001 * static_cast<double>(i);
  return x;
}

}  // namespace

TEST_CASE("dropout keeps about 1 - p of the elements, scaled by 1 / (1 - p)", "[cpu]") {
  const int64_t dims[4]{1, 4, 100, 100};
  const auto x = ramp(40000);
  for (double p : {0.1, 0.5, 0.9}) {
    CAPTURE(p);
    std::vector<double> out(x.size());
    cpu::dropout(x.data(), out.data(), dims, p, whole_mask(dims, 7, 0));
    std::size_t kept = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (out[i] == 0.0) continue;
      ++kept;
      CHECK(std::abs(out[i] - x[i] / (1 - p)) <= 1e-12 * out[i]);
    }
    const double fraction = static_cast<double>(kept) / static_cast<double>(x.size());
    const double sigma = std::sqrt(p * (1 - p) / static_cast<double>(x.size()));
    CHECK(std::abs(fraction - (1 - p)) <= 5 * sigma);
  }
}

TEST_CASE("dropout of a block draws the whole tensor's mask of those elements", "[cpu]") {
  const int64_t whole_dims[4]{1, 4, 6, 10};
  const auto x = ramp(240);
  std::vector<double> whole(x.size());
  cpu::dropout(x.data(), whole.data(), whole_dims, 0.5, whole_mask(whole_dims, 3, 5));
  // the block of rows [3, 6) of dim 2 and columns [5, 10) of dim 3 (two axes sharding two dims)
  const int64_t block_dims[4]{1, 4, 3, 5};
  compute::dropout_mask m = whole_mask(whole_dims, 3, 5);
  m.offset[2] = 3;
  m.offset[3] = 5;
  std::vector<double> block_x, block_out(60);
  for (int64_t a = 0; a < 4; ++a)
    for (int64_t r = 3; r < 6; ++r)
      for (int64_t c = 5; c < 10; ++c) block_x.push_back(x[static_cast<std::size_t>((a * 6 + r) * 10 + c)]);
  cpu::dropout(block_x.data(), block_out.data(), block_dims, 0.5, m);
  std::size_t o = 0, dropped = 0;
  for (int64_t a = 0; a < 4; ++a)
    for (int64_t r = 3; r < 6; ++r)
      for (int64_t c = 5; c < 10; ++c, ++o) {
        CHECK(block_out[o] == whole[static_cast<std::size_t>((a * 6 + r) * 10 + c)]);
        dropped += block_out[o] == 0.0;
      }
  CHECK(dropped > 0);
  CHECK(dropped < 60);
}

TEST_CASE("dropout draws a new mask each step and each layer; p = 0 or inactive copies x", "[cpu]") {
  const int64_t dims[4]{1, 1, 8, 64};
  const auto x = ramp(512);
  std::vector<double> first(x.size()), next(x.size()), layered(x.size()), copy(x.size());
  cpu::dropout(x.data(), first.data(), dims, 0.5, whole_mask(dims, 11, 0));
  cpu::dropout(x.data(), next.data(), dims, 0.5, whole_mask(dims, 11, 1));
  compute::dropout_mask in_layer = whole_mask(dims, 11, 0);
  in_layer.layer = 2;
  cpu::dropout(x.data(), layered.data(), dims, 0.5, in_layer);
  CHECK(first != next);
  CHECK(first != layered);
  std::vector<double> again(x.size());
  cpu::dropout(x.data(), again.data(), dims, 0.5, whole_mask(dims, 11, 0));
  CHECK(again == first);  // a pure function of (seed, step, layer, index)

  cpu::dropout(x.data(), copy.data(), dims, 0.0, whole_mask(dims, 11, 0));
  CHECK(copy == x);
  compute::dropout_mask inactive = whole_mask(dims, 11, 0);
  inactive.run.active = false;
  std::fill(copy.begin(), copy.end(), 0.0);
  cpu::dropout(x.data(), copy.data(), dims, 0.9, inactive);
  CHECK(copy == x);
}
