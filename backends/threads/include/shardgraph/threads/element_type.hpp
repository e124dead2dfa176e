#pragma once
// element_type_of<T>(): a run-time tag of a buffer's element type, so that a rendezvous can check
// that every rank passes the same type before one rank reads another's bytes as T.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <typeinfo>

#include "shardgraph/core/half_types.hpp"

namespace shardgraph::threads::detail {

struct element_type {
  const void* id = nullptr;        // one address per type; equal ids mean equal types
  std::string_view name = "none";  // for error messages

  friend bool operator==(const element_type& a, const element_type& b) { return a.id == b.id; }
};

template <class T>
inline constexpr char element_type_id = 0;

template <class T>
element_type element_type_of() {
  std::string_view name = typeid(T).name();
  if constexpr (std::is_same_v<T, float>) name = "float";
  if constexpr (std::is_same_v<T, double>) name = "double";
  if constexpr (std::is_same_v<T, std::int8_t>) name = "int8";
  if constexpr (std::is_same_v<T, std::uint8_t>) name = "uint8";
  if constexpr (std::is_same_v<T, std::int16_t>) name = "int16";
  if constexpr (std::is_same_v<T, std::uint16_t>) name = "uint16";
  if constexpr (std::is_same_v<T, std::int32_t>) name = "int32";
  if constexpr (std::is_same_v<T, std::uint32_t>) name = "uint32";
  if constexpr (std::is_same_v<T, std::int64_t>) name = "int64";
  if constexpr (std::is_same_v<T, std::uint64_t>) name = "uint64";
  if constexpr (std::is_same_v<T, std::byte>) name = "byte";
  if constexpr (std::is_same_v<T, bfloat16>) name = "bf16";
  if constexpr (std::is_same_v<T, float16>) name = "f16";
  return {&element_type_id<T>, name};
}

}  // namespace shardgraph::threads::detail
