#pragma once
// gradient_buckets: which gradient reductions bind packs into buckets, in which order, and which
// staging buffer each bucket packs into (training{.bucket_bytes}; runtime/gradient_buckets.hpp runs it).
//
//   const plan::gradient_bucket_plan b = plan::plan_gradient_buckets({.compiled = p, .steps = idx, ...});
//   b.buckets[k].members[m];     // the k-th bucket backward fills, its m-th gradient: node, layer, offset
//   b.member_at(node, layer);    // the (bucket, member) the step of `node` packs into in `layer`
//
// An all_reduce whose only reader is a param_grad, on an axis of more than one rank, is not run where
// it stands: its input is packed into a bucket, and the bucket is all-reduced by one collective when
// its last gradient arrives, writing each gradient to its param_grad. Under ZeRO-2 and 3 a param_grad
// left Partial on the zero axis (D ranks) joins a bucket once its copy step has written it: its chunk r
// (ceil(n / D) elements) goes into section r, and the bucket is reduce-scattered, rank r receiving its
// chunk of each. Buckets fill in the order the steps produce gradients (backward: the last layer
// first); the next gradient starts a new bucket where the axis, the dtype or the kind of reduction
// changes, or where it would take the bucket past bucket_bytes (a larger gradient goes alone).
//
// Staging: a bucket of several gradients (or any reduce-scatter bucket: its chunks interleave) packs
// into a staging buffer of its dtype; a bucket of one all-reduced gradient is reduced in that
// gradient's own memory. Per dtype there is one staging buffer, which the buckets fill one after
// another, or, overlapped (communication threads), two that they take in turn, so that one fills while
// the other is reduced. A bucket waits for the reduction of the bucket that used its buffer before it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "shardgraph/core/dtype.hpp"
#include "shardgraph/plan/step_index.hpp"
#include "shardgraph/program/program.hpp"

namespace shardgraph::plan {

// One gradient of a bucket. In a reduce-scatter bucket each of the `parts` sections holds chunk r
// of every member at the member's offset; a chunk's place past the gradient's end is padding.
struct bucket_member {
  int node = -1;              // the all_reduce, or (ZeRO-2, 3) the param_grad
  std::int64_t layer = 0;     // its layer (0 outside a repeat block)
  std::int64_t elements = 0;  // its place in a section: the gradient, or its chunk's ceil(gradient / parts)
  std::int64_t offset = 0;    // where that place starts in the section
  std::int64_t gradient = 0;  // the gradient's elements

  // Elements of chunk r that lie within the gradient (the rest of the place is padding).
  std::int64_t chunk_elements(std::int64_t r) const {
    return std::clamp<std::int64_t>(gradient - r * elements, 0, elements);
  }
};

struct gradient_bucket {
  int axis = -1;
  dtype type = dtype::f32;
  bool scatter = false;       // ZeRO-2, 3: reduce-scattered, each rank receiving its chunk of each member
  int parts = 1;              // sections: the ranks on the axis of a reduce-scatter bucket, else 1
  std::int64_t elements = 0;  // of one section
  std::vector<bucket_member> members;
  int staging = -1;        // the staging buffer it packs into (-1: its one gradient's own memory)
  int previous_user = -1;  // the bucket that packed into that buffer before it (-1: none)

  std::int64_t packed_elements() const { return scatter ? elements * parts : elements; }
  bool staged() const { return scatter || members.size() > 1; }
};

// A staging buffer: the buckets of one dtype that take turn `turn` pack into it.
struct bucket_staging {
  dtype type = dtype::f32;
  int turn = 0;               // 0, or (overlapped) 1
  std::int64_t elements = 0;  // its largest bucket's packed elements
  std::int64_t received = 0;  // reduce-scatter buckets: the largest section (this rank's part), else 0
};

struct bucket_member_ref {
  int bucket = -1, member = -1;
};

struct gradient_bucket_plan {
  std::vector<int> bucketed_grad;       // per node: the param_grad a bucketed all_reduce feeds (-1: none)
  std::vector<bool> written_by_bucket;  // per node: a param_grad whose value a bucket writes
  std::vector<bool> scattered_grad;     // per node: a param_grad reduce-scattered in a bucket (ZeRO-2, 3)
  // Per node: its (bucket, member) per layer; a node outside a repeat block has one, for every layer.
  std::vector<std::vector<bucket_member_ref>> member_of;
  std::vector<gradient_bucket> buckets;  // in the order backward fills them
  std::vector<bucket_staging> staging;
  std::int64_t coordinate = 0;  // this rank's section of a reduce-scatter bucket (on the zero axis)

  const bucket_member_ref& member_at(int node, std::int64_t layer) const {
    const std::vector<bucket_member_ref>& layers = member_of[static_cast<std::size_t>(node)];
    return layers[layers.size() == 1 ? 0 : static_cast<std::size_t>(layer)];
  }
};

struct gradient_bucket_inputs {
  program_view compiled;
  const step_index& steps;                    // the steps' readers and the block's layer count
  const std::vector<std::int64_t>& elements;  // per node: the elements of its value on this rank
  const std::vector<int>& axis_sizes;         // per mesh axis: its ranks
  std::int64_t bucket_bytes = 0;              // the program's training{.bucket_bytes}; 0: no buckets
  int zero_stage = 0, zero_axis = -1;         // the program's ZeRO stage and axis
  int zero_coordinate = 0;                    // this rank's coordinate on the zero axis
  bool packs = false;                         // backend_traits::packs (copy_range and fill_zero)
  bool pipelined = false;                     // pipeline stages reduce their gradients unbucketed
  bool overlapped = false;                    // reductions run on communication threads
};

namespace bucket_detail {

inline std::size_t at(int node) { return static_cast<std::size_t>(node); }

// The all_reduces that buckets take over: the reduction feeding a param_grad (through all_reduces
// over axes of one rank, which are copies: a LayerNorm bias gradient is reduced on dp, then on tp;
// with tp = 1 the dp one is the real reduction).
inline void find_bucketed_reductions(const gradient_bucket_inputs& in, gradient_bucket_plan& plan) {
  const graph_view& g = in.compiled.nodes;
  const auto only_read_by_one = [&](int i) { return in.steps.readers[at(i)].size() == 1; };
  const auto ranks = [&](int i) { return in.axis_sizes[at(g[i].axis)]; };
  for (int i = 0; i < g.size(); ++i) {
    if (g[i].kind != op::param_grad) continue;
    int source = g[i].inputs[0];
    while (g[source].kind == op::all_reduce && only_read_by_one(source) && ranks(source) == 1)
      source = g[source].inputs[0];
    if (g[source].kind == op::all_reduce && only_read_by_one(source) && ranks(source) > 1) {
      plan.bucketed_grad[at(source)] = i;
      plan.written_by_bucket[at(i)] = true;
    }
  }
}

// Node i of `layer` joins the last bucket, or a new one where it does not fit.
inline void pack(const gradient_bucket_inputs& in, gradient_bucket_plan& plan, int i, std::int64_t layer,
                 bool scatters, int scatter_parts) {
  const node& n = in.compiled.nodes[i];
  const int axis = scatters ? in.zero_axis : n.axis;
  const int parts = scatters ? scatter_parts : 1;
  const std::int64_t gradient = in.elements[at(i)];
  const std::int64_t elements = (gradient + parts - 1) / parts;
  std::vector<gradient_bucket>& buckets = plan.buckets;
  const bool fits =
      !buckets.empty() && buckets.back().axis == axis && buckets.back().type == n.type &&
      buckets.back().scatter == scatters &&
      (buckets.back().elements + elements) * parts * static_cast<std::int64_t>(dtype_size(n.type)) <=
          in.bucket_bytes;
  if (!fits) {
    gradient_bucket& opened = buckets.emplace_back();
    opened.axis = axis;
    opened.type = n.type;
    opened.scatter = scatters;
    opened.parts = parts;
  }
  gradient_bucket& b = buckets.back();
  const std::int64_t member_layer = n.body() >= 0 ? layer : 0;
  std::vector<bucket_member_ref>& refs = plan.member_of[at(i)];
  if (refs.size() <= static_cast<std::size_t>(member_layer))
    refs.resize(static_cast<std::size_t>(member_layer) + 1);
  refs[static_cast<std::size_t>(member_layer)] = {static_cast<int>(buckets.size()) - 1,
                                                  static_cast<int>(b.members.size())};
  b.members.push_back({i, member_layer, elements, b.elements, gradient});
  b.elements += elements;
}

// Walks the steps as forward() runs them (a block once per layer) and packs each bucketed
// reduction and each scattered param_grad's copy in that order.
inline void fill_buckets(const gradient_bucket_inputs& in, gradient_bucket_plan& plan, int scatter_parts) {
  const graph_view& g = in.compiled.nodes;
  const auto& steps = in.compiled.steps;
  std::size_t loop_start = 0;
  std::int64_t layer = 0;
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const node& n = g[steps[s].node];
    if (steps[s].kind == step_kind::loop_begin) {
      loop_start = s;
      layer = n.reverse ? in.steps.layers - 1 : 0;
      continue;
    }
    if (steps[s].kind == step_kind::loop_end) {
      const bool reverse = g[n.region].reverse;
      if (reverse ? layer > 0 : layer + 1 < in.steps.layers) {
        layer += reverse ? -1 : 1;
        s = loop_start;
      }
      continue;
    }
    const bool reduces =
        steps[s].kind == step_kind::communicate && plan.bucketed_grad[at(steps[s].node)] >= 0;
    const bool scatters = steps[s].kind == step_kind::copy && plan.scattered_grad[at(steps[s].node)];
    if (reduces || scatters) pack(in, plan, steps[s].node, layer, scatters, scatter_parts);
  }
}

}  // namespace bucket_detail

// Which staging buffer each packed bucket uses (`turns`: 2 overlapped, else 1) and the bucket that
// used it before; the staging buffers, each as large as its largest bucket.
inline void assign_bucket_staging(gradient_bucket_plan& plan, bool overlapped) {
  const int turns = overlapped ? 2 : 1;
  std::vector<std::pair<dtype, int>> packed;  // per dtype: its packed buckets so far
  std::vector<int> last_user;                 // per staging buffer: the latest bucket packed into it
  for (int k = 0; k < static_cast<int>(plan.buckets.size()); ++k) {
    gradient_bucket& b = plan.buckets[static_cast<std::size_t>(k)];
    if (!b.staged()) continue;
    auto count = std::find_if(packed.begin(), packed.end(), [&](const auto& e) { return e.first == b.type; });
    if (count == packed.end()) count = packed.emplace(packed.end(), b.type, 0);
    const int turn = count->second++ % turns;
    std::size_t e = 0;
    while (e < plan.staging.size() && (plan.staging[e].type != b.type || plan.staging[e].turn != turn)) ++e;
    if (e == plan.staging.size()) {
      plan.staging.emplace_back().type = b.type;
      plan.staging.back().turn = turn;
      last_user.push_back(-1);
    }
    bucket_staging& staging = plan.staging[e];
    b.staging = static_cast<int>(e);
    b.previous_user = last_user[e];
    last_user[e] = k;
    staging.elements = std::max(staging.elements, b.packed_elements());
    if (b.scatter) staging.received = std::max(staging.received, b.elements);
  }
}

inline gradient_bucket_plan plan_gradient_buckets(const gradient_bucket_inputs& in) {
  const graph_view& g = in.compiled.nodes;
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  gradient_bucket_plan plan;
  plan.bucketed_grad.assign(at(g.size()), -1);
  plan.written_by_bucket.assign(at(g.size()), false);
  plan.scattered_grad.assign(at(g.size()), false);
  plan.member_of.assign(at(g.size()), {});
  plan.coordinate = in.zero_coordinate;
  if (!in.packs || !in.compiled.is_training() || in.bucket_bytes <= 0 || in.pipelined) return plan;
  bucket_detail::find_bucketed_reductions(in, plan);
  // ZeRO-2 and 3: gradients stay Partial on the zero axis through backward (autodiff's deferred
  // axis). Each is reduce-scattered there once its param_grad holds it; one that a bucket on
  // another axis writes (a tensor-parallel all_reduce) is left to the trainer.
  const int scatter_parts = in.zero_stage >= 2 ? in.axis_sizes[at(in.zero_axis)] : 1;
  if (scatter_parts > 1)
    for (int i = 0; i < g.size(); ++i)
      if (g[i].kind == op::param_grad && !plan.written_by_bucket[at(i)] && in.elements[at(i)] > 0)
        plan.scattered_grad[at(i)] = true;
  bucket_detail::fill_buckets(in, plan, scatter_parts);
  for (int i = 0; i < g.size(); ++i)  // a param_grad no step copies is not scattered
    if (plan.scattered_grad[at(i)] && plan.member_of[at(i)].empty()) plan.scattered_grad[at(i)] = false;
  assign_bucket_staging(plan, in.overlapped);
  return plan;
}

}  // namespace shardgraph::plan
