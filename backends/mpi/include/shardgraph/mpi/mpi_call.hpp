#pragma once
// Turns the return code of an MPI call into shardgraph::error. The communicators of this backend
// use MPI_ERRORS_RETURN, so a failing call returns here instead of aborting the job; the message
// names the call, the rank (in `where`) and MPI's own description of the error.
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"
#include "shardgraph/mpi/mpi_header.hpp"

namespace shardgraph::mpi {

inline std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

// `where` reads like "mpi::communicator::all_gather on rank 2 of 4".
inline void check_mpi_call(int code, std::string_view call, std::string_view where) {
  if (code == MPI_SUCCESS) return;
  fail(where, std::string(call) + " failed: " + mpi_error_text(code),
       "check that every rank of the communicator makes the same calls in the same order, with matching "
       "element types, sizes, peers and tags");
}

}  // namespace shardgraph::mpi
