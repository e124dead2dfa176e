#pragma once
// host_tensor: a dense, row-major tensor in host memory with its dtype and shape; how inputs
// reach a program and outputs leave it. A shape whose byte count exceeds 64 bits, or memory the host
// cannot give, is a shardgraph::error naming the shape and the bytes, never a wrapped-around size or
// an uncaught std::bad_alloc.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/error.hpp"

namespace shardgraph {

class host_tensor {
 public:
  host_tensor() = default;
  host_tensor(dtype type, std::vector<std::int64_t> shape) : type_(type), shape_(std::move(shape)) {
    const std::string where = "host_tensor " + shape_text();
    numel_ = checked_product(shape_, where);
    const std::size_t bytes = checked_bytes(numel_, dtype_size(type_), where);
    try {
      bytes_.resize(bytes);
    } catch (const std::bad_alloc&) {
      fail(where,
           "cannot allocate " + std::to_string(bytes) + " bytes of " + std::string(dtype_name(type_)) +
               " in host memory",
           "the host has not that much memory free: use a smaller batch or sequence, or more ranks");
    }
  }
  template <class T>
  static host_tensor from(std::vector<std::int64_t> shape, std::span<const T> values) {
    host_tensor t(dtype_of<T>(), std::move(shape));
    if (static_cast<std::int64_t>(values.size()) != t.numel())
      fail("host_tensor", std::to_string(values.size()) + " values for a shape of " + std::to_string(t.numel()) + " elements",
           "give one value per element");
    if (!values.empty()) std::memcpy(t.bytes_.data(), values.data(), t.bytes_.size());
    return t;
  }
  template <class T>
  static host_tensor from(std::vector<std::int64_t> shape, const std::vector<T>& values) {
    return from<T>(std::move(shape), std::span<const T>(values));
  }

  dtype type() const { return type_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const { return numel_; }
  // "(2, 3)"
  std::string shape_text() const {
    std::string s = "(";
    for (std::size_t k = 0; k < shape_.size(); ++k) s += (k ? ", " : "") + std::to_string(shape_[k]);
    return s + ")";
  }
  std::span<std::byte> bytes() { return bytes_; }
  std::span<const std::byte> bytes() const { return bytes_; }

  template <class T>
  std::span<T> values() {
    check<T>();
    return {reinterpret_cast<T*>(bytes_.data()), static_cast<std::size_t>(numel())};
  }
  template <class T>
  std::span<const T> values() const {
    check<T>();
    return {reinterpret_cast<const T*>(bytes_.data()), static_cast<std::size_t>(numel())};
  }
  // Stores v into floating element i, rounded to the tensor's dtype (to nearest even for bf16, f16).
  void set(std::int64_t i, double v) {
    const auto k = static_cast<std::size_t>(i);
    switch (type_) {
      case dtype::f64: values<double>()[k] = v; return;
      case dtype::f32: values<float>()[k] = static_cast<float>(v); return;
      case dtype::bf16: values<bfloat16>()[k] = bfloat16(static_cast<float>(v)); return;
      case dtype::f16: values<float16>()[k] = float16(static_cast<float>(v)); return;
      default: fail("host_tensor::set", "dtype " + std::string(dtype_name(type_)) + " is not floating point", "store integers through values<T>()");
    }
  }
  // Any floating or integer element as double (for comparisons and printing).
  double at(std::int64_t i) const {
    switch (type_) {
      case dtype::f64: return values<double>()[static_cast<std::size_t>(i)];
      case dtype::f32: return values<float>()[static_cast<std::size_t>(i)];
      case dtype::i64: return static_cast<double>(values<std::int64_t>()[static_cast<std::size_t>(i)]);
      case dtype::i32: return values<std::int32_t>()[static_cast<std::size_t>(i)];
      case dtype::bf16: return static_cast<float>(values<bfloat16>()[static_cast<std::size_t>(i)]);
      case dtype::f16: return static_cast<float>(values<float16>()[static_cast<std::size_t>(i)]);
      default: fail("host_tensor::at", "dtype " + std::string(dtype_name(type_)) + " is not readable on the host", "convert it first");
    }
  }

 private:
  template <class T>
  void check() const {
    if (dtype_of<T>() != type_)
      fail("host_tensor", "read as " + std::string(dtype_name(dtype_of<T>())) + " but holds " + std::string(dtype_name(type_)),
           "read it with its own element type");
  }
  dtype type_ = dtype::f32;
  std::vector<std::int64_t> shape_;
  std::int64_t numel_ = 1;  // the product of shape_, checked at construction
  std::vector<std::byte> bytes_;
};

}  // namespace shardgraph
