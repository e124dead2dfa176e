#pragma once
// Argument checks shared by the cpu kernels. A kernel sees raw pointers and local sizes only, so it
// can check what those say: sizes are not negative, a buffer that must hold data is not null, and
// divisibility the kernel relies on. Each failure throws shardgraph::error naming the kernel.
#include <cstdint>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"

namespace shardgraph::cpu::detail {

inline void check_size(std::string_view kernel, std::string_view name, std::int64_t value) {
  if (value < 0) {
    fail(kernel, std::string(name) + " is " + std::to_string(value) + ", a negative size",
         "pass the local size of this rank's buffer, which is 0 or more");
  }
}

// A pointer may be null only when the buffer it names holds no elements.
inline void check_pointer(std::string_view kernel, std::string_view name, const void* pointer,
                          std::int64_t elements) {
  if (pointer == nullptr && elements > 0) {
    fail(kernel, std::string(name) + " is null but should hold " + std::to_string(elements) + " elements",
         "pass a buffer of that many elements");
  }
}

}  // namespace shardgraph::cpu::detail
