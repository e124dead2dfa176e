// The run-time side of buckets and ZeRO-3 on two thread ranks, from plans written here:
// bucket_reductions packs a bucket's gradients into its staging buffer and writes each one's sum to
// its param_grad, reduces a bucket of one gradient in that gradient's memory, gives each rank its
// chunk of a reduce-scattered sum (zero past the gradient's end), and on a communication thread
// writes nothing before finish_all; zero3_parameters keeps chunk r of each slice and all-gathers a
// block weight's layer into buffer layer % 2 and the weights outside blocks into the values given.
//
// Catch2's assertions are not thread-safe: ranks record what they saw, the test thread checks it.
#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/gradient_buckets.hpp>
#include <shardgraph/runtime/zero3_gathers.hpp>
#include <shardgraph/threads.hpp>

#include <memory>
#include <span>
#include <vector>

#include "catch.hpp"
#include "support/cpu_threads_rank_program.hpp"

namespace sg = shardgraph;
using sg::threads::communicator;
using buffer = sg::cpu::backend::buffer;
using values = std::vector<double>;

namespace {

constexpr int ranks = 2;

buffer upload(sg::cpu::backend& b, const values& v) {
  buffer x = b.allocate(sg::dtype::f64, static_cast<std::int64_t>(v.size()));
  b.upload(x, v.data());
  return x;
}
values download(sg::cpu::backend& b, const buffer& x) {
  values v(static_cast<std::size_t>(x.numel()));
  b.download(x, v.data());
  return v;
}

sg::plan::bucket_member member(int node, std::int64_t elements, std::int64_t offset, std::int64_t gradient) {
  sg::plan::bucket_member m;
  m.node = node;
  m.elements = elements;
  m.offset = offset;
  m.gradient = gradient;
  return m;
}
sg::plan::gradient_bucket bucket(bool scatter, int parts, std::int64_t elements, int staging,
                                 std::vector<sg::plan::bucket_member> members) {
  sg::plan::gradient_bucket b;
  b.axis = 0;
  b.type = sg::dtype::f64;
  b.scatter = scatter;
  b.parts = parts;
  b.elements = elements;
  b.staging = staging;
  b.members = std::move(members);
  return b;
}
sg::plan::bucket_staging staging(std::int64_t elements, std::int64_t received) {
  sg::plan::bucket_staging s;
  s.type = sg::dtype::f64;
  s.elements = elements;
  s.received = received;
  return s;
}

// Nodes 0, 1, 2 are all_reduces feeding param_grads 3, 4, 5: bucket 0 packs 0 (2 elements) and
// 1 (3 elements) into staging buffer 0; bucket 1 reduces node 2's 4 elements in place.
sg::plan::gradient_bucket_plan all_reduce_plan() {
  sg::plan::gradient_bucket_plan p;
  p.bucketed_grad = {3, 4, 5, -1, -1, -1};
  p.written_by_bucket = {false, false, false, true, true, true};
  p.scattered_grad.assign(6, false);
  p.member_of = {{{0, 0}}, {{0, 1}}, {{1, 0}}, {}, {}, {}};
  p.buckets = {bucket(false, 1, 5, 0, {member(0, 2, 0, 2), member(1, 3, 2, 3)}),
               bucket(false, 1, 4, -1, {member(2, 4, 0, 4)})};
  p.staging = {staging(5, 0)};
  return p;
}

struct all_reduced {
  bool half_full_between = false;
  values before_finish;  // bucket 0's first gradient before finish_all (overlapped)
  std::vector<values> gradients;
};

all_reduced run_all_reduce(communicator& comm, bool overlapped) {
  sg::cpu::backend backend;
  sg::bucket_reductions<sg::cpu::backend, communicator> buckets(all_reduce_plan());
  buckets.allocate_chunks(backend, [&](int, sg::dtype t, std::int64_t n) { return backend.allocate(t, n); });
  buckets.allocate_staging(backend,
                           [&](const auto&, sg::dtype t, std::int64_t n) { return backend.allocate(t, n); });
  std::vector<std::unique_ptr<sg::comm::comm_worker<communicator>>> workers;
  if (overlapped)
    workers.push_back(std::make_unique<sg::comm::comm_worker<communicator>>(comm.split(0, comm.rank())));
  const sg::axis_channels<communicator> axes{std::span<communicator>(&comm, 1), workers};
  const double r = comm.rank();
  std::vector<buffer> inputs{upload(backend, {1 + r, 2 + r}), upload(backend, {10 * r, 1, 2}),
                             upload(backend, {r, r, r, r})};
  std::vector<buffer> grads{upload(backend, {0, 0}), upload(backend, {0, 0, 0}),
                            upload(backend, {0, 0, 0, 0})};
  const auto gradient_at = [&](int param_grad, std::int64_t) -> buffer& {
    return grads[static_cast<std::size_t>(param_grad - 3)];
  };
  all_reduced seen;
  buckets.add(backend, axes, 0, 0, inputs[0], gradient_at);
  seen.half_full_between = buckets.half_full();
  buckets.add(backend, axes, 1, 0, inputs[1], gradient_at);
  buckets.add(backend, axes, 2, 0, inputs[2], gradient_at);
  seen.before_finish = download(backend, grads[0]);
  buckets.finish_all(backend, axes, gradient_at);
  for (const buffer& g : grads) seen.gradients.push_back(download(backend, g));
  return seen;
}

}  // namespace

TEST_CASE("bucket_reductions: all-reduced buckets write each gradient's sum, in place or packed",
          "[runtime][threads]") {
  for (bool overlapped : {false, true}) {
    CAPTURE(overlapped);
    std::vector<all_reduced> by_rank(ranks);
    sg::threads::world(ranks).run([&](communicator& comm) {
      by_rank[static_cast<std::size_t>(comm.rank())] = run_all_reduce(comm, overlapped);
    });
    for (const all_reduced& seen : by_rank) {
      CHECK(seen.half_full_between);
      // Packed gradients are written from the staging buffer by finish (here: at once; overlapped:
      // in finish_all, after the thread's reduction).
      CHECK(seen.before_finish == (overlapped ? values{0, 0} : values{3, 5}));
      REQUIRE(seen.gradients.size() == 3);
      CHECK(seen.gradients[0] == values{3, 5});
      CHECK(seen.gradients[1] == values{10, 2, 4});
      CHECK(seen.gradients[2] == values{1, 1, 1, 1});
    }
  }
}

TEST_CASE("bucket_reductions: a reduce-scatter bucket gives rank r chunk r of each sum",
          "[runtime][threads]") {
  // Param_grads 0 (5 elements, chunks of 3) and 1 (2 elements, chunks of 1): sections of 4.
  std::vector<std::vector<values>> by_rank(ranks);
  sg::threads::world(ranks).run([&](communicator& comm) {
    sg::plan::gradient_bucket_plan p;
    p.bucketed_grad.assign(2, -1);
    p.written_by_bucket.assign(2, false);
    p.scattered_grad.assign(2, true);
    p.member_of = {{{0, 0}}, {{0, 1}}};
    p.buckets = {bucket(true, 2, 4, 0, {member(0, 3, 0, 5), member(1, 1, 3, 2)})};
    p.staging = {staging(8, 4)};
    p.coordinate = comm.rank();
    sg::cpu::backend backend;
    sg::bucket_reductions<sg::cpu::backend, communicator> buckets(std::move(p));
    buckets.allocate_chunks(backend,
                            [&](int, sg::dtype t, std::int64_t n) { return backend.allocate(t, n); });
    buckets.allocate_staging(
        backend, [&](const auto&, sg::dtype t, std::int64_t n) { return backend.allocate(t, n); });
    const sg::axis_channels<communicator> axes{std::span<communicator>(&comm, 1), {}};
    const double f = comm.rank() + 1;
    std::vector<buffer> grads{upload(backend, {f, 2 * f, 3 * f, 4 * f, 5 * f}),
                              upload(backend, {7 * f, 8 * f})};
    const auto gradient_at = [&](int i, std::int64_t) -> buffer& {
      return grads[static_cast<std::size_t>(i)];
    };
    buckets.add(backend, axes, 0, 0, grads[0], gradient_at);
    buckets.add(backend, axes, 1, 0, grads[1], gradient_at);
    buckets.finish_all(backend, axes, gradient_at);
    for (int i : {0, 1})
      by_rank[static_cast<std::size_t>(comm.rank())].push_back(
          download(backend, *buckets.reduced_chunk(i, 0)));
  });
  // The sums over both ranks are 3 x (1..5) and 3 x (7, 8).
  CHECK(by_rank[0] == std::vector<values>{{3, 6, 9}, {21}});
  CHECK(by_rank[1] == std::vector<values>{{12, 15, 0}, {24}});  // past the gradient's end: zero
}

TEST_CASE("zero3_parameters: chunk r stored, layers gathered into buffer layer % 2", "[runtime][threads]") {
  // Node 0 is a repeat block whose weight is node 1 (5 elements: chunks of 3, 2 layers); node 2 is
  // a weight outside it (3 elements: chunks of 2).
  struct seen {
    values stored, layer0, layer1, unlayered;
    std::int64_t released = -1;
  };
  std::vector<seen> by_rank(ranks);
  sg::threads::world(ranks).run([&](communicator& comm) {
    sg::plan::zero3_gathers z;
    z.axis = 0;
    z.parts = ranks;
    z.coordinate = comm.rank();
    z.chunk = {0, 3, 2};
    z.layer_weights = {{1}, {}, {}};
    z.unlayered = {2};
    sg::cpu::backend backend;
    sg::zero3_parameters<sg::cpu::backend, communicator> parameters(std::move(z));
    const auto allocate = [&](std::int64_t n) { return backend.allocate(sg::dtype::f64, n); };
    parameters.allocate(
        1, 2, true, [](std::int64_t) { return true; }, allocate);
    parameters.allocate(
        2, 1, false, [](std::int64_t) { return true; }, allocate);
    const auto load = [&](int i, std::int64_t layer, const values& slice) {
      parameters.upload(backend, i, layer, std::as_bytes(std::span(slice)),
                        static_cast<std::int64_t>(slice.size()));
    };
    load(1, 0, {1, 2, 3, 4, 5});
    load(1, 1, {11, 12, 13, 14, 15});
    load(2, 0, {100, 101, 102});
    const sg::axis_channels<communicator> axes{std::span<communicator>(&comm, 1), {}};
    std::vector<buffer> whole(3);
    seen& s = by_rank[static_cast<std::size_t>(comm.rank())];
    s.stored = download(backend, parameters.stored(1, 0));
    parameters.gather_layer(backend, axes, 0, 0, false, 0, 2);  // layer 0, and layer 1 prefetched
    s.layer0 = download(backend, *parameters.gathered_layer(1, 0));
    s.layer1 = download(backend, *parameters.gathered_layer(1, 1));
    parameters.gather_unlayered(backend, axes, whole);
    s.unlayered = download(backend, whole[2]);
    parameters.release_unlayered(backend, whole);
    s.released = whole[2].numel();
  });
  CHECK(by_rank[0].stored == values{1, 2, 3});
  CHECK(by_rank[1].stored == values{4, 5, 0});  // the slice's end, zero-padded to the chunk
  for (const seen& s : by_rank) {
    CHECK(s.layer0 == values{1, 2, 3, 4, 5, 0});
    CHECK(s.layer1 == values{11, 12, 13, 14, 15, 0});
    CHECK(s.unlayered == values{100, 101, 102, 0});
    CHECK(s.released == 0);
  }
}
