// plan::plan_gradient_buckets on the two-layer MLP of plan_test_models.hpp at dp = 2, tp = 2: which
// reductions are bucketed, the buckets' members in the order backward produces them (layer 1's w_out
// and w_in, then layer 0's, then the head's, which the program reduces after the block), offsets and
// sections, ZeRO-2's chunks of ceil(n / 2), and which staging buffer each bucket packs into with and
// without overlap.
#include <shardgraph/plan/gradient_buckets.hpp>

#include "plan_test_models.hpp"

namespace sg = shardgraph;
using namespace plan_test_models;

namespace {

constexpr sg::program data_parallel = sg::compile<mlp_blocks, sg::training{}>();
constexpr sg::program zero2 = sg::compile<mlp_blocks, sg::training{.zero_stage = 2}>();
constexpr sg::program inference = sg::compile<mlp_blocks, sg::inference{}>();

// The plan of rank (dp 1, tp 0) of a dp x tp mesh.
struct bucket_case {
  const sg::program& p;
  int dp = 2, tp = 2;
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  bool overlapped = false, packs = true, pipelined = false;

  sg::plan::gradient_bucket_plan plan() const {
    const sg::plan::step_index steps = sg::plan::index_steps(p, layers);
    const std::vector<std::int64_t> elements = local_elements(p, dp, tp, {1, 0});
    const std::vector<int> axis_sizes{dp, tp};
    return sg::plan::plan_gradient_buckets({.compiled = p,
                                            .steps = steps,
                                            .elements = elements,
                                            .axis_sizes = axis_sizes,
                                            .bucket_bytes = bucket_bytes,
                                            .zero_stage = p.zero_stage,
                                            .zero_axis = p.zero_axis,
                                            .zero_coordinate = 1,
                                            .packs = packs,
                                            .pipelined = pipelined,
                                            .overlapped = overlapped});
  }
};

struct expected_member {
  int node;
  std::int64_t layer, elements, offset, gradient;
};
void check_members(const sg::plan::gradient_bucket& b, const std::vector<expected_member>& expected) {
  REQUIRE(b.members.size() == expected.size());
  for (std::size_t m = 0; m < expected.size(); ++m) {
    CAPTURE(m);
    CHECK(b.members[m].node == expected[m].node);
    CHECK(b.members[m].layer == expected[m].layer);
    CHECK(b.members[m].elements == expected[m].elements);
    CHECK(b.members[m].offset == expected[m].offset);
    CHECK(b.members[m].gradient == expected[m].gradient);
  }
}

// Which staging buffer each bucket packs into and the bucket that used it before.
std::vector<std::pair<int, int>> staging_of(const sg::plan::gradient_bucket_plan& plan) {
  std::vector<std::pair<int, int>> r;
  for (const sg::plan::gradient_bucket& b : plan.buckets) r.emplace_back(b.staging, b.previous_user);
  return r;
}
using turns = std::vector<std::pair<int, int>>;

}  // namespace

TEST_CASE("plan_gradient_buckets: dp all_reduces in one bucket, last layer first", "[plan]") {
  const sg::graph& g = data_parallel.nodes;
  const sg::plan::gradient_bucket_plan plan = bucket_case{data_parallel}.plan();
  const int head = gradient_of(g, "w_head"), w_in = gradient_of(g, "h.w_in"),
            w_out = gradient_of(g, "h.w_out");
  // Each gradient's all_reduce on dp feeds its param_grad: bucketed, the param_grad written by it.
  for (int grad : {head, w_in, w_out}) {
    const int reduction = g[grad].inputs[0];
    REQUIRE(g[reduction].kind == sg::op::all_reduce);
    CHECK(g[reduction].axis == dp_axis);
    CHECK(plan.bucketed_grad[static_cast<std::size_t>(reduction)] == grad);
    CHECK(plan.written_by_bucket[static_cast<std::size_t>(grad)]);
    CHECK_FALSE(plan.scattered_grad[static_cast<std::size_t>(grad)]);
  }
  // 35 + 4 x 15 = 95 f32 elements: one bucket of the default 25 MiB, packed one after another.
  REQUIRE(plan.buckets.size() == 1);
  const sg::plan::gradient_bucket& b = plan.buckets[0];
  CHECK(b.axis == dp_axis);
  CHECK(b.type == sg::dtype::f32);
  CHECK_FALSE(b.scatter);
  CHECK(b.parts == 1);
  CHECK(b.elements == 95);
  CHECK(b.packed_elements() == 95);
  const int head_reduction = g[head].inputs[0], in_reduction = g[w_in].inputs[0],
            out_reduction = g[w_out].inputs[0];
  check_members(b, {{out_reduction, 1, 15, 0, 15},
                    {in_reduction, 1, 15, 15, 15},
                    {out_reduction, 0, 15, 30, 15},
                    {in_reduction, 0, 15, 45, 15},
                    {head_reduction, 0, 35, 60, 35}});
  CHECK(plan.member_at(in_reduction, 1).bucket == 0);
  CHECK(plan.member_at(in_reduction, 1).member == 1);
  CHECK(plan.member_at(in_reduction, 0).member == 3);
  CHECK(plan.member_at(head_reduction, 1).member == 4);  // outside the block: one member for every layer
  // One staging buffer of 95 elements, nothing received (an all-reduce).
  REQUIRE(plan.staging.size() == 1);
  CHECK(plan.staging[0].elements == 95);
  CHECK(plan.staging[0].received == 0);
  CHECK(staging_of(plan) == turns{{0, -1}});
}

TEST_CASE("plan_gradient_buckets: bucket_bytes splits the buckets; overlap alternates two buffers",
          "[plan]") {
  const sg::graph& g = data_parallel.nodes;
  // 120 bytes = 30 f32: two gradients of 15 per bucket; the head's 35 go alone (larger than a bucket).
  bucket_case c{data_parallel};
  c.bucket_bytes = 120;
  const sg::plan::gradient_bucket_plan in_turn = c.plan();
  REQUIRE(in_turn.buckets.size() == 3);
  const int in_reduction = g[gradient_of(g, "h.w_in")].inputs[0];
  const int out_reduction = g[gradient_of(g, "h.w_out")].inputs[0];
  check_members(in_turn.buckets[0], {{out_reduction, 1, 15, 0, 15}, {in_reduction, 1, 15, 15, 15}});
  check_members(in_turn.buckets[1], {{out_reduction, 0, 15, 0, 15}, {in_reduction, 0, 15, 15, 15}});
  check_members(in_turn.buckets[2], {{g[gradient_of(g, "w_head")].inputs[0], 0, 35, 0, 35}});
  CHECK_FALSE(in_turn.buckets[2].staged());  // reduced in the head gradient's own memory
  // One staging buffer that buckets 0 and 1 fill in turn: bucket 1 waits for bucket 0.
  CHECK(staging_of(in_turn) == turns{{0, -1}, {0, 0}, {-1, -1}});
  REQUIRE(in_turn.staging.size() == 1);
  CHECK(in_turn.staging[0].elements == 30);
  // Overlapped: two buffers, one filling while the other is reduced.
  c.overlapped = true;
  const sg::plan::gradient_bucket_plan overlapped = c.plan();
  CHECK(staging_of(overlapped) == turns{{0, -1}, {1, -1}, {-1, -1}});
  REQUIRE(overlapped.staging.size() == 2);
  CHECK(overlapped.staging[0].turn == 0);
  CHECK(overlapped.staging[1].turn == 1);
  CHECK(overlapped.staging[1].elements == 30);
}

TEST_CASE("plan_gradient_buckets: ZeRO-2 reduce-scatters chunks of ceil(n / dp) per section", "[plan]") {
  const sg::graph& g = zero2.nodes;
  const sg::plan::gradient_bucket_plan plan = bucket_case{zero2}.plan();
  const int head = gradient_of(g, "w_head"), w_in = gradient_of(g, "h.w_in"),
            w_out = gradient_of(g, "h.w_out");
  for (int grad : {head, w_in, w_out}) CHECK(plan.scattered_grad[static_cast<std::size_t>(grad)]);
  REQUIRE(plan.buckets.size() == 1);
  const sg::plan::gradient_bucket& b = plan.buckets[0];
  CHECK(b.scatter);
  CHECK(b.axis == dp_axis);
  CHECK(b.parts == 2);
  // Chunks: ceil(35 / 2) = 18 and ceil(15 / 2) = 8; a section holds one chunk of each gradient.
  check_members(b, {{w_out, 1, 8, 0, 15},
                    {w_in, 1, 8, 8, 15},
                    {w_out, 0, 8, 16, 15},
                    {w_in, 0, 8, 24, 15},
                    {head, 0, 18, 32, 35}});
  CHECK(b.elements == 50);
  CHECK(b.packed_elements() == 100);
  // Rank 1's chunk of the head holds 35 - 18 = 17 elements, the rest padding.
  CHECK(b.members[4].chunk_elements(0) == 18);
  CHECK(b.members[4].chunk_elements(1) == 17);
  CHECK(b.members[0].chunk_elements(1) == 7);
  CHECK(plan.coordinate == 1);
  REQUIRE(plan.staging.size() == 1);
  CHECK(plan.staging[0].elements == 100);
  CHECK(plan.staging[0].received == 50);
  CHECK(staging_of(plan) == turns{{0, -1}});
}

TEST_CASE("plan_gradient_buckets: every reduce-scatter bucket is staged, in turns when overlapped",
          "[plan]") {
  bucket_case c{zero2};
  c.bucket_bytes = 4;  // smaller than any gradient: each goes alone
  const sg::plan::gradient_bucket_plan in_turn = c.plan();
  REQUIRE(in_turn.buckets.size() == 5);
  CHECK(staging_of(in_turn) == turns{{0, -1}, {0, 0}, {0, 1}, {0, 2}, {0, 3}});
  REQUIRE(in_turn.staging.size() == 1);
  CHECK(in_turn.staging[0].elements == 36);  // the head's two chunks of 18
  CHECK(in_turn.staging[0].received == 18);
  c.overlapped = true;
  const sg::plan::gradient_bucket_plan overlapped = c.plan();
  CHECK(staging_of(overlapped) == turns{{0, -1}, {1, -1}, {0, 0}, {1, 1}, {0, 2}});
  REQUIRE(overlapped.staging.size() == 2);
  CHECK(overlapped.staging[0].elements == 36);
  CHECK(overlapped.staging[1].elements == 16);
  CHECK(overlapped.staging[1].received == 8);
}

TEST_CASE("plan_gradient_buckets: no buckets where nothing is reduced or packing is not possible", "[plan]") {
  const auto empty = [](const bucket_case& c) {
    const sg::plan::gradient_bucket_plan plan = c.plan();
    CHECK(plan.bucketed_grad.size() == static_cast<std::size_t>(c.p.nodes.size()));
    CHECK(std::count(plan.scattered_grad.begin(), plan.scattered_grad.end(), true) == 0);
    return plan.buckets.empty() && plan.staging.empty();
  };
  const auto with = [](const sg::program& p, auto change) {
    bucket_case c{p};
    change(c);
    return c;
  };
  CHECK(empty(with(data_parallel, [](bucket_case& c) { c.dp = 1; })));  // one rank on dp: nothing to reduce
  CHECK(empty(with(zero2, [](bucket_case& c) { c.dp = 1; })));
  CHECK(empty(with(data_parallel, [](bucket_case& c) { c.bucket_bytes = 0; })));
  // a backend without copy_range and fill_zero
  CHECK(empty(with(data_parallel, [](bucket_case& c) { c.packs = false; })));
  CHECK(empty(with(zero2, [](bucket_case& c) { c.pipelined = true; })));
  CHECK(empty(bucket_case{inference}));
  CHECK_FALSE(empty(bucket_case{data_parallel}));
}
