#pragma once
// What every communicator accepts as a buffer, and the conversions its convenience overloads
// share: any contiguous, sized range (std::span, std::vector, std::array) becomes a span, read-only
// for inputs. A mismatch between in and out is one compile-time message, not a page of overloads.
#include <ranges>
#include <span>
#include <type_traits>

namespace shardgraph::comm {

template <class R>
concept contiguous_buffer = std::ranges::contiguous_range<R> && std::ranges::sized_range<R>;

// The element type of a buffer, const if the buffer is read-only.
template <class R>
using buffer_element_t = std::remove_reference_t<std::ranges::range_reference_t<R>>;

// True when In and Out hold the same, writable-out element type; otherwise a static_assert names
// the mismatch (the caller's `if constexpr` then skips the call that would pile more errors on top).
template <class In, class Out>
constexpr bool same_elements() {
  using in_element = std::remove_const_t<buffer_element_t<In>>;
  using out_element = buffer_element_t<Out>;
  static_assert(std::is_same_v<in_element, std::remove_const_t<out_element>>,
                "shardgraph: collective: in and out hold different element types. Pass buffers of one type");
  static_assert(!std::is_const_v<out_element>, "shardgraph: collective: out is read-only. Pass a writable buffer");
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

}  // namespace shardgraph::comm
