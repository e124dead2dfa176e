#pragma once
// shardgraph::cpu::buffer: one value of a program in host memory, its dtype and element count.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "shardgraph/core/dtype.hpp"

namespace shardgraph::cpu {

class buffer {
 public:
  buffer() = default;
  buffer(dtype type, std::int64_t numel)
      : type_(type), numel_(numel), bytes_(static_cast<std::size_t>(numel) * dtype_size(type)) {}
  dtype type() const { return type_; }
  std::int64_t numel() const { return numel_; }
  std::size_t size_bytes() const { return bytes_.size(); }
  std::byte* bytes() { return bytes_.data(); }
  const std::byte* bytes() const { return bytes_.data(); }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }

 private:
  dtype type_ = dtype::f32;
  std::int64_t numel_ = 0;
  std::vector<std::byte> bytes_;
};

}  // namespace shardgraph::cpu
