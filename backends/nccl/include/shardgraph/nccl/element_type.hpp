#pragma once
// Which buffers the nccl communicator moves and sums.
//
// Moves (all_gather, all_to_all, broadcast, send, recv) carry any trivially copyable element type as
// its bytes (ncclUint8, sizeof(T) per element): bf16 and f16 held as std::uint16_t travel unchanged.
// Sums (all_reduce, reduce_scatter, barrier) need an NCCL arithmetic type: bfloat16 and float16
// (core/half_types.hpp), float, double, and 8-, 32- and 64-bit integers. 16-bit integers have none,
// and the integer sum of raw bf16 bits in a std::uint16_t means nothing, so sums of them do not
// compile: pass the values as bfloat16 or float16.
#include <nccl.h>

#include <cstddef>
#include <type_traits>

#include "shardgraph/core/half_types.hpp"

namespace shardgraph::nccl::detail {

template <class T>
inline constexpr bool movable = std::is_trivially_copyable_v<T>;

// The NCCL type that sums T, or ncclNumTypes if there is none.
template <class T>
constexpr ncclDataType_t sum_type_of() {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return ncclBfloat16;
  } else if constexpr (std::is_same_v<T, float16>) {
    return ncclFloat16;
  } else if constexpr (std::is_same_v<T, float>) {
    return ncclFloat32;
  } else if constexpr (std::is_same_v<T, double>) {
    return ncclFloat64;
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    constexpr bool is_signed = std::is_signed_v<T>;
    if constexpr (sizeof(T) == 1) return is_signed ? ncclInt8 : ncclUint8;
    if constexpr (sizeof(T) == 4) return is_signed ? ncclInt32 : ncclUint32;
    if constexpr (sizeof(T) == 8) return is_signed ? ncclInt64 : ncclUint64;
    return ncclNumTypes;
  } else {
    return ncclNumTypes;
  }
}

template <class T>
inline constexpr bool summable = sum_type_of<std::remove_const_t<T>>() != ncclNumTypes;

template <class T>
inline constexpr bool is_16_bit_integer = std::is_integral_v<T> && sizeof(T) == 2;

}  // namespace shardgraph::nccl::detail
