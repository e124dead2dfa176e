#pragma once
// axis_channels: what the run-time parts hand a communicator. Per mesh axis the rank's communicator
// and, where collectives overlap compute, its communication thread (comm/comm_worker.hpp); a
// backend buffer's memory as a span of its element type.
//
//   const axis_channels<Comm> axes{comms, workers};
//   with_element_type(b.type(), [&](auto zero) {
//     using T = decltype(zero);
//     axes.comm(a).all_reduce(buffer_span<T>(backend, b, b.numel()));
//   });
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "shardgraph/comm/comm_worker.hpp"
#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/error.hpp"

namespace shardgraph {

namespace detail {
// fn(T{}) for the host element type T of dtype t; the dtypes without one have no communication path.
template <class Fn>
void with_element_type(dtype t, Fn&& fn) {
  if (!visit_host_element(t, fn))
    fail("executor", "dtype " + std::string(dtype_name(t)) + " has no communication path yet",
         "use f32 or f64");
}
}  // namespace detail

// The first `numel` elements of buffer b's memory, for a communicator. It reads and writes that
// memory directly, so the work a GPU backend has queued on its stream is finished first.
template <class T, class Backend>
std::span<T> buffer_span(Backend& backend, typename Backend::buffer& b, std::int64_t numel) {
  if constexpr (requires { backend.synchronize(); }) backend.synchronize();
  return {static_cast<T*>(backend.data(b)), static_cast<std::size_t>(numel)};
}

template <class Comm>
struct axis_channels {
  std::span<Comm> comms;  // per mesh axis: this rank's communicator of the axis's group
  // per mesh axis: its communication thread (null, or empty for every axis: collectives run here)
  std::span<const std::unique_ptr<comm::comm_worker<Comm>>> workers;

  Comm& comm(int axis) const { return comms[static_cast<std::size_t>(axis)]; }
  comm::comm_worker<Comm>* worker(int axis) const {
    return workers.empty() ? nullptr : workers[static_cast<std::size_t>(axis)].get();
  }
};

}  // namespace shardgraph
