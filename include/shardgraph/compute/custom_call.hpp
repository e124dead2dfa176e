#pragma once
// custom_call: what a custom op's kernel (ir/custom_op.hpp) receives for one call on one rank. Every
// shape is LOCAL (the rank's block of each tensor, all dimensions, row-major); the memory is the
// backend's (`backend.data(buffer)`: host memory on cpu, device memory on cuda, where `stream` is
// the backend's cudaStream_t; null on backends without a stream).
//
//   static void cpu(const shardgraph::custom_call& c) {        // y = tanh(x * s)
//     std::span<const double> x = c.in[0].values<double>();
//     std::span<double> y = c.out.values<double>();
//     for (std::size_t i = 0; i < y.size(); ++i) y[i] = std::tanh(x[i] * c.attribute);
//   }
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "shardgraph/core/dtype.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/ir/node.hpp"

namespace shardgraph {

struct custom_tensor {
  void* data = nullptr;
  dtype type = dtype::f32;
  std::span<const std::int64_t> shape{};  // local, every dimension

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
  }
  // The elements as T; T must be the tensor's element type (double for f64, float for f32, ...).
  template <class T>
  std::span<T> values() const {
    if (dtype_of<std::remove_const_t<T>>() != type)
      fail("custom op kernel", "a tensor of dtype " + std::string(dtype_name(type)) + " was read as " +
                                   std::string(dtype_name(dtype_of<std::remove_const_t<T>>())),
           "read it with its element type (c.type tells which), or build the model with the dtype the kernel takes");
    return {static_cast<T*>(data), static_cast<std::size_t>(numel())};
  }
};

struct custom_call {
  std::string_view op;  // the op's name
  custom_tensor out;
  std::array<custom_tensor, max_inputs> in{};
  int input_count = 0;
  double attribute = 0.0;  // the node's scalar: apply<Op>(inputs, attribute)
  void* stream = nullptr;  // the backend's stream (cuda: a cudaStream_t); null where it has none
};

}  // namespace shardgraph
