#pragma once
// The collective argument check that every collective of the MPI communicator makes first.
//
// Each rank passes its verdict on its own arguments (a complete shardgraph error message, or empty
// when they are valid) and the values that must be equal on every rank (element type, count,
// root). One MPI_Allreduce(MIN) of a few integers then tells every rank the first rank whose
// arguments are invalid and the minimum and maximum of each value. Either every rank throws or none
// does, so a wrong size on one rank never leaves the others waiting in a collective it skipped,
// and sizes that differ between ranks (which MPI cannot always detect: it may truncate or hang)
// throw the same message on every rank. Cost: one small all-reduce per call, microseconds within a
// node, paid for errors that would otherwise hang a job. It is the first step of every collective,
// so it is where a rank that does not join is usually noticed: it waits within the call's deadline.
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"
#include "shardgraph/mpi/deadline.hpp"
#include "shardgraph/mpi/mpi_call.hpp"
#include "shardgraph/mpi/mpi_header.hpp"

namespace shardgraph::mpi {

struct agreed_value {
  std::string_view name;                         // e.g. "element count", as said in the message
  std::int64_t value;                            // this rank's value, 0 or more
  std::string (*describe)(long long) = nullptr;  // how to print a value; nullptr prints the number
};

inline void check_arguments_agree(MPI_Comm comm, int rank, std::string_view where,
                                  const std::string& local_problem,
                                  std::initializer_list<agreed_value> values, const call_deadline& deadline) {
  constexpr std::size_t max_values = 4;
  constexpr std::int64_t no_failure = std::numeric_limits<std::int64_t>::max();
  if (values.size() > max_values) {
    fail(where, "the argument check was given more values than it can compare",
         "raise max_values in shardgraph/mpi/argument_agreement.hpp");
  }
  // [first failing rank, v0, -v0, v1, -v1, ...]: MIN of v is the minimum, -(MIN of -v) the maximum.
  std::array<std::int64_t, 1 + 2 * max_values> summary{};
  summary[0] = local_problem.empty() ? no_failure : rank;
  std::size_t slot = 1;
  for (const agreed_value& v : values) {
    summary[slot++] = v.value;
    summary[slot++] = -v.value;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi_call(MPI_Iallreduce(MPI_IN_PLACE, summary.data(), static_cast<int>(slot), MPI_INT64_T, MPI_MIN,
                                comm, &request),
                 "MPI_Iallreduce (argument check)", where);
  wait_within(request, deadline, "MPI_Iallreduce (argument check)", where);

  if (!local_problem.empty()) throw error(local_problem);
  if (summary[0] != no_failure) {
    const std::string first = std::to_string(summary[0]);
    fail(where, "rank " + first + " passed invalid arguments to this call (its own error says which)",
         "fix the arguments on rank " + first + "; every rank threw so that none waits for it");
  }
  slot = 1;
  for (const agreed_value& v : values) {
    const std::int64_t low = summary[slot++];
    const std::int64_t high = -summary[slot++];
    if (low == high) continue;
    const auto show = [&](std::int64_t x) {
      return v.describe != nullptr ? v.describe(static_cast<long long>(x)) : std::to_string(x);
    };
    fail(where,
         "the ranks disagree on the " + std::string(v.name) + ": it ranges from " + show(low) + " to " +
             show(high) + " (this rank: " + show(v.value) + ")",
         "pass the same " + std::string(v.name) + " on every rank of the communicator");
  }
}

}  // namespace shardgraph::mpi
