#pragma once
// bucket_reductions: runs the bucket plan (plan/gradient_buckets.hpp) during backward. It holds the
// staging buffers and this rank's reduce-scattered chunks; the gradients it reads and the param_grads
// it writes are the executor's, passed in.
//
//   bucket_reductions<Backend, Comm> buckets(plan::plan_gradient_buckets({...}));
//   buckets.allocate_chunks(backend, allocate_for);      // at bind, in the order bind allocates
//   buckets.allocate_staging(backend, allocate_memory);
//   buckets.add(backend, axes, node, layer, gradient, gradient_at);   // at a bucketed step
//   buckets.finish_all(backend, axes, gradient_at);      // at the end of forward()
//
// `gradient_at(param_grad, layer)` returns the executor's buffer of a param_grad in a layer.
// A bucket is reduced when its last gradient arrives: by the caller, or, where the axis has a
// communication thread, posted to it while backward goes on; its gradients are written when its
// reduction has finished (when its staging buffer is wanted again, or in finish_all).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardgraph/comm/communicator.hpp"
#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/plan/backend_traits.hpp"
#include "shardgraph/plan/gradient_buckets.hpp"
#include "shardgraph/runtime/axis_channels.hpp"

namespace shardgraph {

template <compute::ComputeBackend Backend, comm::Communicator Comm>
class bucket_reductions {
 public:
  using buffer = typename Backend::buffer;

  bucket_reductions() = default;
  explicit bucket_reductions(plan::gradient_bucket_plan plan)
      : plan_(std::move(plan)), running_(plan_.buckets.size()), chunks_(plan_.member_of.size()) {}

  const plan::gradient_bucket_plan& plan() const { return plan_; }

  // This rank's chunk of each reduce-scattered gradient, per layer, zeroed: past the gradient's end
  // it stays zero. allocate(param_grad, dtype, elements) -> buffer.
  template <class Allocate>
  void allocate_chunks(Backend& backend, Allocate&& allocate) {
    if constexpr (packs)
      for (const plan::gradient_bucket& b : plan_.buckets)
        for (const plan::bucket_member& m : b.members) {
          if (!b.scatter) continue;
          std::vector<buffer>& chunks = chunks_[at(m.node)];
          while (chunks.size() <= static_cast<std::size_t>(m.layer)) {
            chunks.push_back(allocate(m.node, b.type, m.elements));
            backend.fill_zero(chunks.back());
          }
        }
  }
  // Each staging buffer once, at its largest bucket. allocate(what, dtype, elements) -> buffer.
  template <class Allocate>
  void allocate_staging(Backend& backend, Allocate&& allocate) {
    for (const plan::bucket_staging& s : plan_.staging) {
      staging_.push_back({backend.allocate(s.type, 0), backend.allocate(s.type, 0)});
      if (s.elements > 0)
        staging_.back().memory = allocate("a gradient bucket's staging buffer", s.type, s.elements);
      if (s.received > 0)
        staging_.back().received = allocate("a gradient bucket's received chunk", s.type, s.received);
    }
  }

  // Node `node` of `layer` joins its bucket with `gradient`: an all_reduce's input, or (ZeRO-2, 3)
  // the param_grad's value, chunk r into section r. The bucket is reduced when it is complete.
  template <class GradientAt>
  void add(Backend& backend, const axis_channels<Comm>& axes, int node, std::int64_t layer, buffer& gradient,
           GradientAt&& gradient_at) {
    if constexpr (packs) {
      const auto [which, member] = plan_.member_at(node, layer);
      const plan::gradient_bucket& b = plan_.buckets[at(which)];
      const plan::bucket_member& m = b.members[at(member)];
      if (!b.staged()) {
        buffer& grad = gradient_at(plan_.bucketed_grad[at(node)], m.layer);
        backend.copy_range(gradient, 0, grad, 0, m.elements);
        return reduce(backend, axes, which, grad, gradient_at);
      }
      running& state = running_[at(which)];
      if (state.arrived == 0 && b.previous_user >= 0)
        finish(backend, axes, b.previous_user, gradient_at);  // its staging buffer is this bucket's now
      buffer& packed = staging_[at(b.staging)].memory;
      if (!b.scatter) {
        backend.copy_range(gradient, 0, packed, m.offset, m.elements);
      } else {
        for (std::int64_t r = 0; r < b.parts; ++r)
          if (const std::int64_t count = m.chunk_elements(r); count > 0)
            backend.copy_range(gradient, r * m.elements, packed, r * b.elements + m.offset, count);
      }
      if (++state.arrived < b.members.size()) return;
      state.arrived = 0;
      reduce(backend, axes, which, packed, gradient_at);
    }
  }

  // Waits for every bucket's reduction and writes its gradients.
  template <class GradientAt>
  void finish_all(Backend& backend, const axis_channels<Comm>& axes, GradientAt&& gradient_at) {
    for (int k = 0; k < static_cast<int>(plan_.buckets.size()); ++k) finish(backend, axes, k, gradient_at);
  }

  // Whether a bucket has some but not all of its gradients (after backward: a bug in the plan).
  bool half_full() const {
    for (const running& r : running_)
      if (r.arrived != 0) return true;
    return false;
  }

  // This rank's chunk of a reduce-scattered param_grad's gradient in `layer` (null: not scattered).
  const buffer* reduced_chunk(int param_grad, std::int64_t layer) const {
    const std::vector<buffer>& chunks = chunks_[at(param_grad)];
    if (chunks.empty()) return nullptr;
    return &chunks[chunks.size() == 1 ? 0 : static_cast<std::size_t>(layer)];
  }

  std::int64_t staging_bytes() const {
    std::int64_t bytes = 0;
    for (const staging_buffers& s : staging_)
      bytes += static_cast<std::int64_t>(s.memory.size_bytes() + s.received.size_bytes());
    return bytes;
  }
  std::int64_t chunk_bytes() const {
    std::int64_t bytes = 0;
    for (const std::vector<buffer>& chunks : chunks_)
      for (const buffer& c : chunks) bytes += static_cast<std::int64_t>(c.size_bytes());
    return bytes;
  }

 private:
  static constexpr bool packs = plan::traits_of<Backend>().packs;
  static std::size_t at(int i) { return static_cast<std::size_t>(i); }

  struct running {             // a bucket during backward
    std::size_t arrived = 0;   // its gradients packed so far
    bool in_flight = false;    // reduced or being reduced; its gradients not yet written
    std::uint64_t ticket = 0;  // its job on the communication thread
  };
  struct staging_buffers {
    buffer memory;
    buffer received;  // reduce-scatter buckets: this rank's section
  };

  // All-reduces bucket `which` in `data` (ZeRO-2, 3: reduce-scatters it into its staging's received
  // section): posted to the axis's communication thread, or run here and finished at once.
  template <class GradientAt>
  void reduce(Backend& backend, const axis_channels<Comm>& axes, int which, buffer& data,
              GradientAt&& gradient_at) {
    const plan::gradient_bucket& b = plan_.buckets[at(which)];
    running& state = running_[at(which)];
    comm::comm_worker<Comm>* worker = axes.worker(b.axis);
    detail::with_element_type(b.type, [&](auto zero) {
      using T = decltype(zero);
      const std::span<T> elements = buffer_span<T>(backend, data, b.packed_elements());  // packed by now
      std::function<void(Comm&)> job = [elements](Comm& c) { c.all_reduce(elements); };
      if (b.scatter) {
        const std::span<T> mine = buffer_span<T>(backend, staging_[at(b.staging)].received, b.elements);
        job = [elements, mine](Comm& c) { c.reduce_scatter(std::span<const T>(elements), mine); };
      }
      if (worker != nullptr)
        state.ticket = worker->post(std::move(job));
      else
        job(axes.comm(b.axis));
    });
    state.in_flight = true;
    if (worker == nullptr) finish(backend, axes, which, gradient_at);
  }

  // Waits for bucket `which`'s reduction and writes its gradients: from its staging buffer (a
  // bucket that all-reduces one gradient did so in the gradient's memory), or (ZeRO-2, 3) this
  // rank's chunks from the received section.
  template <class GradientAt>
  void finish(Backend& backend, const axis_channels<Comm>& axes, int which, GradientAt&& gradient_at) {
    if constexpr (packs) {
      running& state = running_[at(which)];
      if (!state.in_flight) return;
      state.in_flight = false;
      const plan::gradient_bucket& b = plan_.buckets[at(which)];
      if (comm::comm_worker<Comm>* worker = axes.worker(b.axis)) worker->wait(state.ticket);
      if (!b.staged()) return;
      staging_buffers& staging = staging_[at(b.staging)];
      for (const plan::bucket_member& done : b.members) {
        if (!b.scatter)
          backend.copy_range(staging.memory, done.offset,
                             gradient_at(plan_.bucketed_grad[at(done.node)], done.layer), 0, done.elements);
        else if (const std::int64_t count = done.chunk_elements(plan_.coordinate); count > 0)
          backend.copy_range(staging.received, done.offset,
                             chunks_[at(done.node)][static_cast<std::size_t>(done.layer)], 0, count);
      }
    }
  }

  plan::gradient_bucket_plan plan_;
  std::vector<running> running_;             // per bucket
  std::vector<staging_buffers> staging_;     // per plan_.staging
  std::vector<std::vector<buffer>> chunks_;  // per param_grad node: per layer, this rank's chunk
};

}  // namespace shardgraph
