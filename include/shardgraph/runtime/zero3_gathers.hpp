#pragma once
// zero3_parameters: runs ZeRO-3's gathers (plan/zero3_gathers.hpp). It holds this rank's chunk of
// every parameter (per layer for block weights) and each block weight's two gathered layers; the
// whole weights outside blocks are the executor's values, passed in.
//
//   zero3_parameters<Backend, Comm> z(plan::plan_zero3_gathers({...}));
//   z.allocate(i, layers, block_weight, holds, allocate);   // at bind, per parameter
//   z.gather_unlayered(backend, axes, values);              // forward() starts
//   z.gather_layer(backend, axes, block, layer, reverse, first, end);   // a block's loop starts
//   z.wait_for_layer(axes, layer); z.prefetch(...);          // each next layer
//   z.release_unlayered(backend, values);                   // forward() ends
//
// Overlapped (the zero axis has a communication thread), a prefetch is one job on that thread that
// gathers every weight of the layer into the buffer the layer before the running one used; the
// running layer waits for it before it starts.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "shardgraph/comm/communicator.hpp"
#include "shardgraph/compute/compute_backend.hpp"
#include "shardgraph/plan/zero3_gathers.hpp"
#include "shardgraph/runtime/axis_channels.hpp"

namespace shardgraph {

template <compute::ComputeBackend Backend, comm::Communicator Comm>
class zero3_parameters {
 public:
  using buffer = typename Backend::buffer;

  zero3_parameters() = default;
  explicit zero3_parameters(plan::zero3_gathers plan)
      : plan_(std::move(plan)), stored_(plan_.chunk.size()), gathered_(plan_.chunk.size()) {}

  const plan::zero3_gathers& plan() const { return plan_; }
  explicit operator bool() const { return plan_.on(); }  // parameters are sharded (ZeRO-3)

  // Parameter i's chunk for each of `layers` layers (holds(layer): this rank holds it, else an empty
  // buffer), and a block weight's two gathered layers. allocate(elements) -> buffer.
  template <class Holds, class Allocate>
  void allocate(int i, std::int64_t layers, bool block_weight, Holds&& holds, Allocate&& allocate) {
    for (std::int64_t l = 0; l < layers; ++l)
      stored_[at(i)].push_back(allocate(holds(l) ? plan_.chunk[at(i)] : 0));
    if (block_weight)
      for (int k = 0; k < plan::zero3_gathers::gathered_layers; ++k)
        gathered_[at(i)].push_back(allocate(plan_.gathered(i)));
  }

  // This rank's chunk of parameter i in `layer` (0 outside a block).
  buffer& stored(int i, std::int64_t layer) { return stored_[at(i)][static_cast<std::size_t>(layer)]; }
  // Block weight i's gathered buffer for `layer` (null: not a block weight).
  buffer* gathered_layer(int i, std::int64_t layer) {
    std::vector<buffer>& layers = gathered_[at(i)];
    return layers.empty() ? nullptr : &layers[at(plan::zero3_gathers::buffer_of(layer))];
  }
  std::int64_t stored_bytes(int i) const { return bytes_of(stored_[at(i)]); }
  std::int64_t gathered_bytes(int i) const { return bytes_of(gathered_[at(i)]); }

  // Keeps chunk r of parameter i's slice in `layer` (the slice's host bytes, `numel` elements),
  // zero-padded to the chunk's length.
  void upload(Backend& backend, int i, std::int64_t layer, std::span<const std::byte> slice,
              std::int64_t numel) {
    buffer& chunk = stored(i, layer);
    const std::size_t e = dtype_size(chunk.type());
    const std::int64_t first = plan_.chunk_first(i, numel), count = plan_.chunk_count(i, numel);
    std::vector<std::byte> bytes(static_cast<std::size_t>(plan_.chunk[at(i)]) * e);
    std::memcpy(bytes.data(), slice.data() + static_cast<std::size_t>(first) * e,
                static_cast<std::size_t>(count) * e);
    backend.upload(chunk, bytes.data());
  }

  // Parameter i's whole slice into `whole` (gathered elements) from every rank's chunk.
  void gather(Backend& backend, const axis_channels<Comm>& axes, int i, buffer& chunk, buffer& whole) {
    detail::with_element_type(chunk.type(), [&](auto zero) {
      using T = decltype(zero);
      axes.comm(plan_.axis)
          .all_gather(std::span<const T>(buffer_span<T>(backend, chunk, plan_.chunk[at(i)])),
                      buffer_span<T>(backend, whole, plan_.gathered(i)));
    });
  }

  // Layer `layer` of the block's weights into its buffer, and the next layer's (the prefetch);
  // [first, end): the layers the running segment covers.
  void gather_layer(Backend& backend, const axis_channels<Comm>& axes, int block, std::int64_t layer,
                    bool reverse, std::int64_t first, std::int64_t end) {
    prefetch(backend, axes, block, layer, first, end);
    prefetch(backend, axes, block, layer + (reverse ? -1 : 1), first, end);
    wait_for_layer(axes, layer);
  }
  // Layer `layer` of the block's weights into the buffer of its parity, when it is in [first, end):
  // here, or overlapped as one job on the zero axis's thread (the buffer's previous layer has finished:
  // buffer_span waits for the backend).
  void prefetch(Backend& backend, const axis_channels<Comm>& axes, int block, std::int64_t layer,
                std::int64_t first, std::int64_t end) {
    if (layer < first || layer >= end) return;
    comm::comm_worker<Comm>* worker = axes.worker(plan_.axis);
    std::vector<std::function<void(Comm&)>> gathers;
    for (int i : plan_.layer_weights[at(block)]) {
      buffer& chunk = stored(i, layer);
      buffer& whole = *gathered_layer(i, layer);
      if (worker == nullptr) {
        gather(backend, axes, i, chunk, whole);
        continue;
      }
      detail::with_element_type(chunk.type(), [&](auto zero) {
        using T = decltype(zero);
        const std::span<const T> in = buffer_span<T>(backend, chunk, plan_.chunk[at(i)]);
        const std::span<T> out = buffer_span<T>(backend, whole, plan_.gathered(i));
        gathers.push_back([in, out](Comm& c) { c.all_gather(in, out); });
      });
    }
    if (worker != nullptr)
      tickets_[at(plan::zero3_gathers::buffer_of(layer))] =
          worker->post([gathers = std::move(gathers)](Comm& c) {
            for (const auto& gather : gathers) gather(c);
          });
  }
  void wait_for_layer(const axis_channels<Comm>& axes, std::int64_t layer) {
    if (comm::comm_worker<Comm>* worker = axes.worker(plan_.axis))
      worker->wait(tickets_[at(plan::zero3_gathers::buffer_of(layer))]);
  }

  // The weights outside blocks, whole, into the executor's `values` (per node), and back to empty.
  void gather_unlayered(Backend& backend, const axis_channels<Comm>& axes, std::span<buffer> values) {
    for (int i : plan_.unlayered) {
      values[at(i)] = backend.allocate(stored(i, 0).type(), plan_.gathered(i));
      gather(backend, axes, i, stored(i, 0), values[at(i)]);
    }
  }
  void release_unlayered(Backend& backend, std::span<buffer> values) {
    for (int i : plan_.unlayered) values[at(i)] = backend.allocate(stored(i, 0).type(), 0);
  }

 private:
  static std::size_t at(int i) { return static_cast<std::size_t>(i); }
  static std::int64_t bytes_of(const std::vector<buffer>& buffers) {
    std::int64_t bytes = 0;
    for (const buffer& b : buffers) bytes += static_cast<std::int64_t>(b.size_bytes());
    return bytes;
  }

  plan::zero3_gathers plan_;
  std::vector<std::vector<buffer>> stored_;    // per parameter node: per layer, this rank's chunk
  std::vector<std::vector<buffer>> gathered_;  // per block parameter node: two gathered layers
  std::array<std::uint64_t, plan::zero3_gathers::gathered_layers> tickets_{};  // the job gathering each
};

}  // namespace shardgraph
