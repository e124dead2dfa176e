#pragma once
// The collectives over any contiguous buffer, written once for every Communicator: function objects
// that turn their buffers into the spans of the concept's members (communicator.hpp) and call them.
//
//   comm::all_reduce(c, data)              c.all_reduce(span<T>(data))
//   comm::all_gather(c, in, out)           c.all_gather(span<const T>(in), span<T>(out))
//   comm::reduce_scatter(c, in, out)       c.reduce_scatter(span<const T>(in), span<T>(out))
//   comm::all_to_all(c, in, out)           c.all_to_all(span<const T>(in), span<T>(out))
//   comm::broadcast(c, data, root)         c.broadcast(span<T>(data), root)
//   comm::send(c, data, peer, tag = 0)     c.send(span<const T>(data), peer, tag)
//   comm::recv(c, data, peer, tag = 0)     c.recv(span<T>(data), peer, tag)
//
// A buffer is any contiguous, sized range: std::span (of const or non-const elements), std::vector,
// std::array. Inputs are read through a span of const elements; outputs must be writable and hold
// the inputs' element type, else one static_assert names the mismatch. What a buffer may hold (host
// or device memory, which element types) is the communicator's rule, as are the checks of sizes.
//
//   std::vector<float> x{1, 2};
//   comm::all_reduce(c, x);                // on 2 ranks holding {1, 2}: x == {2, 4}
#include <ranges>
#include <span>
#include <type_traits>

#include "shardgraph/comm/communicator.hpp"

namespace shardgraph::comm {

template <class R>
concept contiguous_buffer = std::ranges::contiguous_range<R> && std::ranges::sized_range<R>;

// The element type of a buffer, const if the buffer is read-only.
template <class R>
using buffer_element_t = std::remove_reference_t<std::ranges::range_reference_t<R>>;

namespace detail {

// True when In and Out hold the same, writable-out element type; otherwise a static_assert names
// the mismatch (the caller's `if constexpr` then skips the call that would pile more errors on top).
template <class In, class Out>
constexpr bool same_elements() {
  using in_element = std::remove_const_t<buffer_element_t<In>>;
  using out_element = buffer_element_t<Out>;
  static_assert(std::is_same_v<in_element, std::remove_const_t<out_element>>,
                "shardgraph: collective: in and out hold different element types. Pass buffers of one type");
  static_assert(!std::is_const_v<out_element>,
                "shardgraph: collective: out is read-only. Pass a writable buffer");
  return std::is_same_v<in_element, out_element>;
}

template <class R>
auto read_only(R& r) {
  return std::span<const std::remove_const_t<buffer_element_t<R>>>(r);
}
template <class R>
auto writable(R& r) {
  return std::span<buffer_element_t<R>>(r);
}

struct all_reduce_fn {
  template <Communicator C, contiguous_buffer Data>
  void operator()(C& c, Data&& data) const {
    c.all_reduce(writable(data));
  }
};
struct all_gather_fn {
  template <Communicator C, contiguous_buffer In, contiguous_buffer Out>
  void operator()(C& c, In&& in, Out&& out) const {
    if constexpr (same_elements<In, Out>()) c.all_gather(read_only(in), writable(out));
  }
};
struct reduce_scatter_fn {
  template <Communicator C, contiguous_buffer In, contiguous_buffer Out>
  void operator()(C& c, In&& in, Out&& out) const {
    if constexpr (same_elements<In, Out>()) c.reduce_scatter(read_only(in), writable(out));
  }
};
struct all_to_all_fn {
  template <Communicator C, contiguous_buffer In, contiguous_buffer Out>
  void operator()(C& c, In&& in, Out&& out) const {
    if constexpr (same_elements<In, Out>()) c.all_to_all(read_only(in), writable(out));
  }
};
struct broadcast_fn {
  template <Communicator C, contiguous_buffer Data>
  void operator()(C& c, Data&& data, int root) const {
    c.broadcast(writable(data), root);
  }
};
struct send_fn {
  template <Communicator C, contiguous_buffer Data>
  void operator()(C& c, Data&& data, int peer, int tag = 0) const {
    c.send(read_only(data), peer, tag);
  }
};
struct recv_fn {
  template <Communicator C, contiguous_buffer Data>
  void operator()(C& c, Data&& data, int peer, int tag = 0) const {
    c.recv(writable(data), peer, tag);
  }
};

}  // namespace detail

inline constexpr detail::all_reduce_fn all_reduce{};
inline constexpr detail::all_gather_fn all_gather{};
inline constexpr detail::reduce_scatter_fn reduce_scatter{};
inline constexpr detail::all_to_all_fn all_to_all{};
inline constexpr detail::broadcast_fn broadcast{};
inline constexpr detail::send_fn send{};
inline constexpr detail::recv_fn recv{};

}  // namespace shardgraph::comm
