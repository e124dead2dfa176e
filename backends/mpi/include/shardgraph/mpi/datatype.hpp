#pragma once
// The element types the MPI communicator moves and sums, and their MPI datatypes.
//
// Moved: any trivially copyable type, as in the threads backend. Arithmetic types travel as their
// own MPI datatype; any other type (bool, enums, structs, std::byte) as a run of sizeof(T) bytes.
// Summed: arithmetic types other than bool, and the 16-bit floats bfloat16 and float16
// (core/half_types.hpp: each addition in float, rounded once), with T's own +, in rank order. The sum
// is taken by this library, never by MPI (communicator.hpp says why). std::uint16_t sums as an
// integer, as in the threads backend: raw bf16 bits must travel as bfloat16 to be summed as numbers.
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

#include "shardgraph/core/half_types.hpp"
#include "shardgraph/mpi/mpi_call.hpp"
#include "shardgraph/mpi/mpi_header.hpp"

namespace shardgraph::mpi {

template <class T>
concept transferable = std::is_trivially_copyable_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T>;

template <class T>
concept summable = transferable<T> && ((std::is_arithmetic_v<T> && !std::same_as<T, bool>) || is_half_float_v<T>);

namespace detail {

// A committed MPI datatype of Bytes contiguous bytes, made on first use (MPI is running by then) and
// kept for the life of the process.
template <std::size_t Bytes>
MPI_Datatype contiguous_bytes() {
  static const MPI_Datatype type = [] {
    MPI_Datatype made = MPI_DATATYPE_NULL;
    check_mpi_call(MPI_Type_contiguous(static_cast<int>(Bytes), MPI_BYTE, &made), "MPI_Type_contiguous",
                   "mpi::datatype_of");
    check_mpi_call(MPI_Type_commit(&made), "MPI_Type_commit", "mpi::datatype_of");
    return made;
  }();
  return type;
}

template <std::size_t Bytes>
MPI_Datatype signed_integer() {
  if constexpr (Bytes == 1)
    return MPI_INT8_T;
  else if constexpr (Bytes == 2)
    return MPI_INT16_T;
  else if constexpr (Bytes == 4)
    return MPI_INT32_T;
  else if constexpr (Bytes == 8)
    return MPI_INT64_T;
  else
    return contiguous_bytes<Bytes>();
}

template <std::size_t Bytes>
MPI_Datatype unsigned_integer() {
  if constexpr (Bytes == 1)
    return MPI_UINT8_T;
  else if constexpr (Bytes == 2)
    return MPI_UINT16_T;
  else if constexpr (Bytes == 4)
    return MPI_UINT32_T;
  else if constexpr (Bytes == 8)
    return MPI_UINT64_T;
  else
    return contiguous_bytes<Bytes>();
}

}  // namespace detail

// Unconstrained, so that a wrong type gets this one message rather than "no matching function".
template <class T>
MPI_Datatype datatype_of() {
  static_assert(transferable<T>,
                "shardgraph: mpi::datatype_of: the elements are not trivially copyable (or are const). "
                "Move plain data through writable buffers.");
  if constexpr (std::same_as<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::same_as<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::same_as<T, long double>)
    return MPI_LONG_DOUBLE;
  else if constexpr (std::is_integral_v<T> && !std::same_as<T, bool> && std::is_signed_v<T>)
    return detail::signed_integer<sizeof(T)>();
  else if constexpr (std::is_integral_v<T> && !std::same_as<T, bool>)
    return detail::unsigned_integer<sizeof(T)>();
  else if constexpr (sizeof(T) == 1)
    return MPI_BYTE;
  else
    return detail::contiguous_bytes<sizeof(T)>();
}

// The kind and size of an element type in one integer, so that ranks can check with one integer
// all-reduce that they pass the same type (MPI compares at most byte counts):
//   1000 + size: floating point, 2000 + size: signed integer, 3000 + size: unsigned integer,
//   4000 + size: anything else, moved as bytes; 5002: bfloat16, 6002: float16.
template <class T>
constexpr std::int64_t type_code() {
  constexpr auto size = static_cast<std::int64_t>(sizeof(T));
  if constexpr (std::same_as<T, bfloat16>)
    return 5002;
  else if constexpr (std::same_as<T, float16>)
    return 6002;
  else if constexpr (std::is_floating_point_v<T>)
    return 1000 + size;
  else if constexpr (std::is_integral_v<T> && !std::same_as<T, bool> && std::is_signed_v<T>)
    return 2000 + size;
  else if constexpr (std::is_integral_v<T> && !std::same_as<T, bool>)
    return 3000 + size;
  else
    return 4000 + size;
}

// "float", "double", "int32", "uint16", "12-byte plain": the names messages use.
inline std::string type_code_name(long long code) {
  const long long kind = code / 1000, size = code % 1000;
  if (kind == 1) return size == 4 ? "float" : size == 8 ? "double" : "long double";
  if (kind == 2) return "int" + std::to_string(8 * size);
  if (kind == 3) return "uint" + std::to_string(8 * size);
  if (kind == 5) return "bf16";
  if (kind == 6) return "f16";
  return std::to_string(size) + "-byte plain";
}

}  // namespace shardgraph::mpi
