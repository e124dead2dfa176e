// plan::plan_overlapped_axes: the mesh axes that get a communication thread, from the bucket and
// ZeRO-3 plans, written by hand (three axes: dp, tp, pp).
#include <shardgraph/plan/overlapped_axes.hpp>

#include <vector>

#include "catch.hpp"

namespace {

namespace sg = shardgraph;

sg::plan::gradient_bucket_plan buckets_on(std::vector<int> axes) {
  sg::plan::gradient_bucket_plan p;
  for (int a : axes) {
    sg::plan::gradient_bucket b;
    b.axis = a;
    p.buckets.push_back(b);
  }
  return p;
}
sg::plan::zero3_gathers zero3_on(int axis, int parts) {
  sg::plan::zero3_gathers z;
  z.axis = axis;
  z.parts = parts;
  return z;
}

}  // namespace

TEST_CASE("plan_overlapped_axes: the axes of the buckets and of ZeRO-3's gathers", "[plan]") {
  // No bucket, no ZeRO-3: no thread.
  CHECK(sg::plan::plan_overlapped_axes(buckets_on({}), zero3_on(-1, 1), 3) ==
        std::vector<bool>{false, false, false});
  // Buckets on dp (two of them) and tp.
  CHECK(sg::plan::plan_overlapped_axes(buckets_on({0, 0, 1}), zero3_on(-1, 1), 3) ==
        std::vector<bool>{true, true, false});
  // ZeRO-3 over 2 ranks of dp, no buckets: dp's gathers.
  CHECK(sg::plan::plan_overlapped_axes(buckets_on({}), zero3_on(0, 2), 3) ==
        std::vector<bool>{true, false, false});
  // ZeRO-3 on an axis of one rank gathers nothing.
  CHECK(sg::plan::plan_overlapped_axes(buckets_on({}), zero3_on(2, 1), 3) ==
        std::vector<bool>{false, false, false});
}
